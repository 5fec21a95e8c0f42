// `npm start`, in plain JavaScript so any Node runs it: first the Node version (./node-version.mjs
// exits with one line when it is too old), then whether `npm install` ran (without it, Node's own
// module-not-found stack trace for tsx would be all a user saw), then the API itself, in this
// process (signals reach it directly).
import './node-version.mjs';

let register;
try {
  ({ register } = await import('tsx/esm/api'));
} catch {
  console.error(
    'Berth’s dependencies are not installed: run `npm install` in the repository first (see "Quick start" in README.md), then `npm start`.',
  );
  process.exit(78); // EX_CONFIG, as for any other configuration the API cannot start with
}
register();
await import('./main.ts');
