// npm run build -w @berth/cli: one self-contained file, dist/berth.mjs (commander and yaml bundled),
// so the published package has no runtime dependencies. Its CommonJS parts need a `require`.
import { chmodSync } from 'node:fs';
import { build } from 'esbuild';

const outfile = new URL('./dist/berth.mjs', import.meta.url).pathname;
await build({
  entryPoints: [new URL('./src/main.ts', import.meta.url).pathname],
  bundle: true,
  platform: 'node',
  target: 'node24',
  format: 'esm',
  outfile,
  banner: {
    js: "#!/usr/bin/env node\nimport { createRequire as __createRequire } from 'node:module';\nconst require = __createRequire(import.meta.url);",
  },
  logLevel: 'warning',
});
chmodSync(outfile, 0o755);
