// An image build without Docker: each stage of a Dockerfile is a directory, COPY copies what the
// build context (after .dockerignore) or an earlier stage really holds, and the RUN steps our
// Dockerfiles use are carried out here: `npm ci` links exactly the packages npm would install
// (the lockfile closure, linked to this checkout's node_modules), the Prisma client generation
// copies this checkout's generated client, `node …` checks and `rm -rf` run as written. A RUN this
// emulator does not know fails the build, as does a COPY of something the context does not hold.
// What the base image brings (node itself, /etc) is not modelled: the final directory holds
// exactly the files the Dockerfile put into the image.
import { execFileSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
} from 'node:fs';
import { dirname, join, posix, relative } from 'node:path';
import { dockerignore, last, parseDockerfile, stagesOf, type Instruction, type Stage } from './dockerfile.ts';

export interface ImageSpec {
  /** Dockerfile, relative to the repository root. */
  file: string;
  /** Build context, relative to the repository root. */
  context: string;
}

export interface EmulatedImage {
  /** The final stage's filesystem: image path /app/x is `${root}/app/x`. */
  root: string;
  stage: Stage;
  stages: Stage[];
  workdir: string;
  user?: string;
  entrypoint?: string[];
  cmd?: string[];
  env: Record<string, string>;
  expose: number[];
  /** Every file the build context holds, relative to it, after .dockerignore. */
  contextFiles: string[];
}

interface StageState {
  dir: string;
  workdir: string;
  env: Record<string, string>;
}

/** Builds `spec` into `out` (a fresh directory per stage). `repoRoot` is this checkout. */
export function emulateBuild(repoRoot: string, spec: ImageSpec, out: string): EmulatedImage {
  const dockerfile = join(repoRoot, spec.file);
  const context = join(repoRoot, spec.context);
  const stages = stagesOf(parseDockerfile(readFileSync(dockerfile, 'utf8')));
  const contextFiles = listContext(context, ignoreFileFor(dockerfile, context));
  const states = new Map<string, StageState>();

  let state!: StageState;
  for (const [index, stage] of stages.entries()) {
    const dir = join(out, `stage-${index}-${stage.name}`);
    const from = states.get(stage.base);
    if (from) cpSync(from.dir, dir, { recursive: true, verbatimSymlinks: true });
    else mkdirSync(dir, { recursive: true });
    state = { dir, workdir: from?.workdir ?? '/', env: { ...from?.env } };
    for (const ins of stage.instructions) {
      const where = `${spec.file}:${ins.line}`;
      try {
        apply(ins);
      } catch (err) {
        throw new Error(`${where} ${ins.keyword} ${ins.args}: ${(err as Error).message}`, { cause: err });
      }
    }
    states.set(stage.name, state);
  }

  function apply(ins: Instruction) {
    switch (ins.keyword) {
      case 'WORKDIR':
        state.workdir = posix.resolve(state.workdir, ins.args);
        mkdirSync(join(state.dir, state.workdir), { recursive: true });
        return;
      case 'ENV': {
        const m = /^([A-Za-z_][A-Za-z0-9_]*)[= ](.*)$/.exec(ins.args);
        if (!m) throw new Error('cannot read ENV');
        state.env[m[1]!] = m[2]!;
        return;
      }
      case 'COPY':
        return copy(ins);
      case 'RUN':
        return run(ins.args);
      case 'ARG':
      case 'USER':
      case 'EXPOSE':
      case 'STOPSIGNAL':
      case 'ENTRYPOINT':
      case 'CMD':
      case 'LABEL':
      case 'HEALTHCHECK':
        return;
      default:
        throw new Error('instruction not understood by the emulator');
    }
  }

  function copy(ins: Instruction) {
    const words = ins.exec ?? ins.args.split(/\s+/);
    const dest = words.at(-1)!;
    const sources = words.slice(0, -1);
    if (sources.some((s) => /[*?[]/.test(s))) throw new Error('wildcards are not emulated');
    const destPath = posix.resolve(state.workdir, dest);
    const toDir = dest.endsWith('/') || sources.length > 1;
    for (const src of sources) {
      if (ins.flags.from) {
        const stage = states.get(ins.flags.from);
        if (!stage) throw new Error(`--from=${ins.flags.from} is not an earlier stage`);
        const path = join(stage.dir, posix.resolve(stage.workdir, src));
        if (!existsSync(path)) throw new Error(`${src} does not exist in stage ${ins.flags.from}`);
        copyEntry(path, destPath, toDir);
      } else {
        const rel = posix
          .normalize(src)
          .replace(/\/$/, '')
          .replace(/^\.\/?/, '');
        const files = contextFiles.filter((f) => rel === '' || f === rel || f.startsWith(rel + '/'));
        if (files.length === 0)
          throw new Error(`"${src}" not found in the build context ${spec.context} (after .dockerignore)`);
        const isDir = !(files.length === 1 && files[0] === rel);
        for (const f of files) {
          const target = isDir
            ? posix.join(destPath, posix.relative(rel, f))
            : toDir
              ? posix.join(destPath, posix.basename(f))
              : destPath;
          mkdirSync(dirname(join(state.dir, target)), { recursive: true });
          cpSync(join(context, f), join(state.dir, target));
        }
      }
    }
  }

  function copyEntry(path: string, destPath: string, toDir: boolean) {
    if (lstatSync(path).isDirectory()) {
      for (const entry of readdirSync(path))
        cpSync(join(path, entry), join(state.dir, destPath, entry), {
          recursive: true,
          verbatimSymlinks: true,
        });
    } else {
      const target = toDir ? posix.join(destPath, posix.basename(path)) : destPath;
      mkdirSync(dirname(join(state.dir, target)), { recursive: true });
      cpSync(path, join(state.dir, target), { verbatimSymlinks: true });
    }
  }

  function run(command: string) {
    const cwd = join(state.dir, state.workdir);
    const words = command.trim().split(/\s+/);
    if (words[0] === 'npm' && words[1] === 'ci') return npmCi(repoRoot, cwd, words.slice(2));
    if (command.trim() === 'npm run generate -w prisma') return generatePrismaClient(repoRoot, cwd);
    if (command.trim() === 'npm run build -w @berth/web') return buildWeb(cwd);
    if (words[0] === 'rm' && words[1] === '-rf') {
      for (const p of words.slice(2)) {
        if (p.startsWith('/') || p.split('/').includes('..'))
          throw new Error(`refusing to emulate rm -rf ${p}`);
        rmSync(join(cwd, p), { recursive: true, force: true });
      }
      return;
    }
    if (words[0] === 'node') {
      execFileSync('bash', ['-c', command], {
        cwd,
        env: { PATH: process.env.PATH, HOME: cwd, ...state.env },
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: 120_000,
      });
      return;
    }
    throw new Error(
      'RUN step not understood by the emulator (teach test/images/emulate.ts, or keep RUN steps simple)',
    );
  }

  const final = stages.at(-1)!;
  const numbers = (ins: Instruction | undefined) =>
    ins ? ins.args.split(/\s+/).map((p) => Number(p.split('/')[0])) : [];
  return {
    root: state.dir,
    stage: final,
    stages,
    workdir: state.workdir,
    user: last(final, 'USER')?.args,
    entrypoint: last(final, 'ENTRYPOINT')?.exec,
    cmd: last(final, 'CMD')?.exec,
    env: state.env,
    expose: final.instructions.filter((i) => i.keyword === 'EXPOSE').flatMap(numbers),
    contextFiles,
  };
}

/** BuildKit's choice: `<Dockerfile>.dockerignore` next to the Dockerfile, else `<context>/.dockerignore`. */
export function ignoreFileFor(dockerfile: string, context: string): string | undefined {
  for (const candidate of [`${dockerfile}.dockerignore`, join(context, '.dockerignore')])
    if (existsSync(candidate)) return readFileSync(candidate, 'utf8');
  return undefined;
}

/** Files of the build context after .dockerignore (directories it excludes entirely are not walked). */
export function listContext(context: string, ignore: string | undefined): string[] {
  const excluded = dockerignore(ignore);
  const reincludes = (ignore ?? '')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.startsWith('!'))
    .map((l) => l.slice(1).trim().replace(/^\//, ''));
  // A directory that is excluded can still hold re-included files; walk it only if some `!`
  // pattern could reach inside (a literal prefix of it, or a wildcard before any literal part).
  const mayHoldReincluded = (dir: string) =>
    reincludes.some((p) => p.startsWith(dir + '/') || /^[^/]*[*?[]/.test(p.split('/')[0] ?? ''));
  const files: string[] = [];
  const walk = (rel: string) => {
    for (const entry of readdirSync(join(context, rel), { withFileTypes: true })) {
      const path = rel ? `${rel}/${entry.name}` : entry.name;
      if (entry.name === '.git') continue;
      if (entry.isDirectory()) {
        if (!excluded(path) || mayHoldReincluded(path)) walk(path);
      } else if (!excluded(path)) {
        files.push(path);
      }
    }
  };
  walk('');
  return files.sort();
}

interface LockEntry {
  link?: boolean;
  resolved?: string;
  dev?: boolean;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  devDependencies?: Record<string, string>;
}

/**
 * The top-level node_modules entries `npm ci` creates, from package-lock.json: the packages reachable
 * from the workspace(s) asked for through dependencies, optional dependencies and peer dependencies
 * (optional peers too, when the lockfile holds them, as npm does), plus the workspaces' own dev
 * dependencies unless --omit=dev, which drops every package the lockfile flags `dev` (but keeps
 * `devOptional` ones, as npm does). Workspaces, including the ones asked for, appear as links.
 */
export function npmInstallSet(
  lock: { packages: Record<string, LockEntry> },
  workspaces: string[] | undefined,
  omitDev: boolean,
): Map<string, { link?: string }> {
  const pkgs = lock.packages;
  const all = Object.keys(pkgs).filter((k) => k && !k.includes('node_modules'));
  const roots = workspaces ?? ['', ...all];
  const links = Object.entries(pkgs).filter(([, e]) => e.link);
  const seen = new Set<string>();
  const queue = [...roots];
  while (queue.length) {
    const loc = queue.pop()!;
    if (seen.has(loc)) continue;
    seen.add(loc);
    const entry = pkgs[loc];
    if (!entry) throw new Error(`package-lock.json has no entry "${loc}"`);
    if (entry.link) {
      queue.push(entry.resolved!);
      continue;
    }
    const isWorkspace = !loc.includes('node_modules');
    if (isWorkspace) for (const [at, l] of links) if (l.resolved === loc) seen.add(at);
    const optional = new Set([
      ...Object.keys(entry.optionalDependencies ?? {}),
      ...Object.entries(entry.peerDependenciesMeta ?? {})
        .filter(([, m]) => m.optional)
        .map(([n]) => n),
    ]);
    const names = [
      ...Object.keys(entry.dependencies ?? {}),
      ...Object.keys(entry.optionalDependencies ?? {}),
      ...Object.keys(entry.peerDependencies ?? {}),
      ...(isWorkspace && !omitDev ? Object.keys(entry.devDependencies ?? {}) : []),
    ];
    for (const name of names) {
      const found = resolveFrom(pkgs, loc, name);
      if (found !== undefined) queue.push(found);
      else if (!optional.has(name)) throw new Error(`${loc || 'root'}: ${name} not in the lockfile`);
    }
  }
  const top = new Map<string, { link?: string }>();
  for (const loc of seen) {
    const m = /^node_modules\/((?:@[^/]+\/)?[^/]+)$/.exec(loc);
    const entry = pkgs[loc]!;
    if (!m || (omitDev && entry.dev)) continue;
    top.set(m[1]!, entry.link ? { link: entry.resolved! } : {});
  }
  return top;
}

/** Node's lookup of `name` from package location `loc`: loc/node_modules, then each parent's. */
function resolveFrom(pkgs: Record<string, LockEntry>, loc: string, name: string): string | undefined {
  let base = loc;
  for (;;) {
    const candidate = base ? `${base}/node_modules/${name}` : `node_modules/${name}`;
    if (pkgs[candidate]) return candidate;
    if (!base) return undefined;
    const i = base.lastIndexOf('/node_modules/');
    base = i >= 0 ? base.slice(0, i) : '';
  }
}

function npmCi(repoRoot: string, cwd: string, flags: string[]) {
  for (const f of ['package.json', 'package-lock.json'])
    if (!existsSync(join(cwd, f))) throw new Error(`npm ci needs ${f} in the working directory`);
  const manifest = JSON.parse(readFileSync(join(cwd, 'package.json'), 'utf8')) as { workspaces?: string[] };
  // npm ci checks every workspace of package.json against the lockfile: each manifest must be there.
  for (const ws of manifest.workspaces ?? [])
    if (!existsSync(join(cwd, ws, 'package.json')))
      throw new Error(`npm ci would fail: ${ws}/package.json is missing`);
  const workspaces: string[] = [];
  for (let i = 0; i < flags.length; i++) {
    if (flags[i] === '--workspace' || flags[i] === '-w') workspaces.push(flags[++i]!);
    else if (flags[i]!.startsWith('--workspace=')) workspaces.push(flags[i]!.slice('--workspace='.length));
  }
  const lock = JSON.parse(readFileSync(join(cwd, 'package-lock.json'), 'utf8'));
  const set = npmInstallSet(lock, workspaces.length ? workspaces : undefined, flags.includes('--omit=dev'));
  for (const [name, { link }] of set) {
    const at = join(cwd, 'node_modules', name);
    mkdirSync(dirname(at), { recursive: true });
    // Workspaces link into the image's own tree; registry packages to this checkout's copy of them.
    symlinkSync(
      link !== undefined ? relative(dirname(at), join(cwd, link)) : join(repoRoot, 'node_modules', name),
      at,
    );
  }
}

/** The dashboard's Vite build, run for real on the stage's own files and node_modules. */
function buildWeb(cwd: string) {
  for (const f of ['apps/web/index.html', 'apps/web/vite.config.ts', 'apps/web/src', 'node_modules/vite'])
    if (!existsSync(join(cwd, f))) throw new Error(`the dashboard's build needs ${f}`);
  execFileSync(
    process.execPath,
    [join(cwd, 'node_modules/vite/bin/vite.js'), 'build', '--logLevel', 'warn'],
    {
      cwd: join(cwd, 'apps/web'),
      env: { PATH: process.env.PATH, HOME: cwd },
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 120_000,
    },
  );
}

function generatePrismaClient(repoRoot: string, cwd: string) {
  for (const f of ['prisma/schema.prisma', 'prisma/scripts/generate.mjs', 'node_modules/@prisma/client'])
    if (!existsSync(join(cwd, f))) throw new Error(`prisma generate needs ${f}`);
  const generated = join(repoRoot, 'prisma', 'src', 'generated');
  if (!statSync(generated).isDirectory())
    throw new Error('run npm ci first: no generated Prisma client here');
  // The schema this checkout's client was generated from is the one the image generates from.
  if (
    readFileSync(join(cwd, 'prisma/schema.prisma'), 'utf8') !==
    readFileSync(join(repoRoot, 'prisma/schema.prisma'), 'utf8')
  )
    throw new Error('prisma/schema.prisma in the image differs from the checkout');
  cpSync(generated, join(cwd, 'prisma', 'src', 'generated'), { recursive: true });
}
