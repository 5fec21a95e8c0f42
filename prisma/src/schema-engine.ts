// Prisma's schema engine compiled to WebAssembly, loaded by hand. The package's entry imports the
// .wasm file as an ES module, which Node does not do; we compile it ourselves and wire the imports
// (see shared/notes/prisma-offline.md). This is what lets migrations run on machines that cannot
// download Prisma's native engines, CI included.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { bindMigrationAwareSqlAdapterFactory } from '@prisma/driver-adapter-utils';
import type { SqlMigrationAwareDriverAdapterFactory } from '@prisma/driver-adapter-utils';
import type { SchemaEngine } from '@prisma/schema-engine-wasm';

// Node has WebAssembly, but TypeScript's Node types do not declare it without the DOM library.
interface WasmModule {
  readonly brand: 'WebAssembly.Module';
}
interface Wasm {
  compile(bytes: Uint8Array): Promise<WasmModule>;
  instantiate(module: WasmModule, imports: object): Promise<{ exports: Record<string, unknown> }>;
  Module: { imports(module: WasmModule): { module: string; name: string }[] };
}
const WebAssembly = (globalThis as unknown as { WebAssembly: Wasm }).WebAssembly;

type Bindings = Record<string, unknown> & {
  __wbg_set_wasm(exports: Record<string, unknown>): void;
  SchemaEngine: typeof SchemaEngine;
};

let bindings: Promise<Bindings> | undefined;

function loadBindings(): Promise<Bindings> {
  bindings ??= (async () => {
    const bgUrl = import.meta.resolve('@prisma/schema-engine-wasm/schema_engine_bg');
    const dir = path.dirname(fileURLToPath(bgUrl));
    const bg = (await import(bgUrl)) as Bindings;
    const module = await WebAssembly.compile(await readFile(path.join(dir, 'schema_engine_bg.wasm')));
    const imports: Record<string, Record<string, unknown>> = {};
    for (const imp of WebAssembly.Module.imports(module)) {
      (imports[imp.module] ??= {})[imp.name] = bg[imp.name];
    }
    const instance = await WebAssembly.instantiate(module, imports);
    bg.__wbg_set_wasm(instance.exports);
    (instance.exports.__wbindgen_start as (() => void) | undefined)?.();
    return bg;
  })();
  return bindings;
}

/**
 * Runs `fn` with a schema engine over `adapterFactory`, then frees the engine and closes every
 * connection it opened. Freeing the engine alone leaves its pool open, and with it the session
 * that holds Prisma's migration advisory lock, so the next migration run would wait for it.
 */
export async function withSchemaEngine<T>(
  adapterFactory: SqlMigrationAwareDriverAdapterFactory,
  schema: { path: string; content: string },
  fn: (engine: SchemaEngine) => Promise<T>,
): Promise<T> {
  const { SchemaEngine: Engine } = await loadBindings();
  const opened: { dispose(): Promise<void> }[] = [];
  const tracking: SqlMigrationAwareDriverAdapterFactory = {
    provider: adapterFactory.provider,
    adapterName: adapterFactory.adapterName,
    connect: async () => {
      const a = await adapterFactory.connect();
      opened.push(a);
      return a;
    },
    connectToShadowDb: async () => {
      const a = await adapterFactory.connectToShadowDb();
      opened.push(a);
      return a;
    },
  };
  const engine = await Engine.new(
    { datamodels: [[schema.path, schema.content]] },
    () => {},
    bindMigrationAwareSqlAdapterFactory(tracking),
  );
  try {
    return await fn(engine);
  } finally {
    engine.free();
    for (const a of opened) await a.dispose().catch(() => {});
  }
}
