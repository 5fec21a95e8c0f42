// `npm start`, in plain JavaScript so any Node runs it: first the Node version (./node-version.mjs
// exits with one line when it is too old), then whether `npm install` ran (without it, Node's own
// module-not-found stack trace would be all a user saw), then the API itself, in this process
// (signals reach it directly). Node runs the TypeScript itself (its type stripping, on by default
// since Node 23.6): the code as written, line for line, with no loader thread and no helper calls
// wrapped around every function made at run time. Only where stripping is turned off
// (`--no-experimental-strip-types`) does tsx's loader compile it instead.
import './node-version.mjs';

try {
  import.meta.resolve('express');
  if (!process.features.typescript) import.meta.resolve('tsx/esm/api');
} catch {
  console.error(
    'Berth’s dependencies are not installed: run `npm install` in the repository first (see "Quick start" in README.md), then `npm start`.',
  );
  process.exit(78); // EX_CONFIG, as for any other configuration the API cannot start with
}
if (!process.features.typescript) (await import('tsx/esm/api')).register();
await import('./main.ts');
