// Programmatic entry: start a simulator in-process (tests, local mode) or spawn the CLI (`cliPath`).

import { fileURLToPath } from 'node:url';
import { resolveOptions, type EngineSimOptions } from './config.ts';
import { serve, type EngineSimHandle, type ServeOptions } from './server.ts';

export {
  defaultOptions,
  resolveOptions,
  usage,
  ConfigError,
  runtimeKnobs,
  type EngineSimOptions,
  type RuntimeKnobs,
} from './config.ts';
export { parseArgs } from './args.ts';
export { StartupError, SIM_VERSION, type EngineSimHandle, type ServeOptions } from './server.ts';
export { countTokens, chatPrompt, completionPrompt, generateText, seedFor } from './text.ts';
export { parseCallScript } from './tools.ts';
export { embed } from './embeddings.ts';

/** Absolute path of the CLI, for `spawn(process.execPath, ['--import', 'tsx', cliPath, ...args])`. */
export const cliPath = fileURLToPath(new URL('./main.ts', import.meta.url));

export interface StartEngineSimOptions extends Partial<EngineSimOptions>, ServeOptions {
  /** Wait until the model is "loaded" before resolving (default true). */
  waitReady?: boolean;
}

/**
 * Starts a simulator. Defaults differ from the CLI in one place: `host` 127.0.0.1 and `port` 0 (a free
 * port), so tests never collide. With `waitReady` (the default) a start-up failure rejects with
 * StartupError.
 */
export async function startEngineSim(options: StartEngineSimOptions = {}): Promise<EngineSimHandle> {
  const { waitReady = true, log, hfToken, env, ...rest } = options;
  const resolved = resolveOptions({ host: '127.0.0.1', port: 0, ...rest });
  const serveOptions: ServeOptions = { log, env };
  if ('hfToken' in options) serveOptions.hfToken = hfToken;
  const handle = await serve(resolved, serveOptions);
  if (waitReady) await handle.ready;
  return handle;
}
export { spawnEngineSim, type SpawnedEngineSim } from './spawn.ts';
