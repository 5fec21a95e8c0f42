// What can be checked about the published images without building them: the Dockerfile reader
// and .dockerignore matcher the image tests rely on, and, for every image of the release workflow,
// pinned bases on the Node version CI tests with, a numeric non-root user that the chart's
// runAsNonRoot can verify, the workspace's own entry point, and the port the chart and operator use.
// test/images/images.int.test.ts builds each image without Docker and starts it.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ENGINE_PORT } from '@berth/crds';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { dockerignore, last, parseDockerfile, stagesOf } from './dockerfile.ts';
import { ignoreFileFor } from './emulate.ts';
import {
  expectedEntry,
  releaseImages,
  releaseWorkflow,
  repoRoot,
  testedNodeVersion,
  workspaceOf,
} from './images.ts';

const read = (p: string) => readFileSync(join(repoRoot, p), 'utf8');

describe('parseDockerfile', () => {
  it('joins continuations, drops comments (also inside a continuation), reads flags and exec form', () => {
    const ins = parseDockerfile(
      [
        '# syntax=docker/dockerfile:1',
        'ARG BASE=node:24.9.0-slim',
        'FROM ${BASE} AS build',
        'RUN node --flag \\',
        '# a comment in the middle',
        '      -e "x"',
        'COPY --from=build --chown=0:0 /src/ /app/',
        'ENTRYPOINT ["node", "/app/main.ts"]',
      ].join('\n'),
    );
    expect(ins.map((i) => [i.keyword, i.line])).toEqual([
      ['ARG', 2],
      ['FROM', 3],
      ['RUN', 4],
      ['COPY', 7],
      ['ENTRYPOINT', 8],
    ]);
    expect(ins[2]!.args.replace(/\s+/g, ' ')).toBe('node --flag -e "x"');
    expect(ins[3]!.flags).toEqual({ from: 'build', chown: '0:0' });
    expect(ins[3]!.args).toBe('/src/ /app/');
    expect(ins[4]!.exec).toEqual(['node', '/app/main.ts']);
    const [stage] = stagesOf(ins);
    expect(stage).toMatchObject({ name: 'build', base: 'node:24.9.0-slim' });
    expect(stagesOf(ins, { BASE: 'mirror.local/node:24.9.0-slim' })[0]!.base).toBe(
      'mirror.local/node:24.9.0-slim',
    );
  });

  it('refuses a FROM whose ARG has no value', () => {
    expect(() => stagesOf(parseDockerfile('FROM ${NOPE}'))).toThrow(/\$\{NOPE\} has no value/);
  });
});

describe('dockerignore (BuildKit / moby patternmatcher semantics)', () => {
  const cases: [string, string, boolean][] = [
    ['*\n!src/', 'src/main.ts', false],
    ['*\n!src/', 'src/deep/x.ts', false],
    ['*\n!src/', 'README.md', true],
    ['*\n!src/', 'lib/x.ts', true],
    ['*\n!src/\n**/*.test.ts', 'src/a/b.test.ts', true],
    ['*\n!src/\n**/*.test.ts', 'src/b.ts', false],
    ['/node_modules', 'node_modules/x/index.js', true],
    ['docs/**', 'docs/a/b.md', true],
    ['docs/**', 'docs.md', false],
    ['a/?.txt', 'a/b.txt', true],
    ['a/?.txt', 'a/bc.txt', false],
    ['*.md\n!README.md', 'README.md', false],
    ['!README.md\n*.md', 'README.md', true],
    ['build/', 'build', true],
    ['x.(y)', 'x.(y)', true],
    ['', 'anything', false],
  ];
  for (const [patterns, path, excluded] of cases) {
    it(`${JSON.stringify(patterns)} ${excluded ? 'excludes' : 'keeps'} ${path}`, () => {
      expect(dockerignore(patterns)(path)).toBe(excluded);
    });
  }

  it("the repository's .dockerignore keeps sources and manifests, drops tests, local data, generated code and secrets", () => {
    const excluded = dockerignore(read('.dockerignore'));
    for (const kept of [
      'package-lock.json',
      'apps/api/src/main.ts',
      'operator/src/main.ts',
      'prisma/migrations',
    ])
      expect(excluded(kept), kept).toBe(false);
    for (const dropped of [
      'apps/api/src/app.test.ts',
      'node_modules/zod/package.json',
      'prisma/src/generated/client.ts',
      'apps/api/.data/db',
      '.env',
      '.git/config',
      'README.md',
    ])
      expect(excluded(dropped), dropped).toBe(true);
  });
});

describe('the images of the release workflow', () => {
  const images = releaseImages();
  const values = parse(read('charts/berth/values.yaml')) as {
    api: { image: { repository: string } };
    operator: { image: { repository: string }; metricsPort: number };
    podSecurityContext: { runAsUser: number; runAsGroup: number };
  };
  const cpuOnly = parse(read('charts/berth/values-cpu-only.yaml')) as { operator: { engineImage: string } };
  const appVersion = (parse(read('charts/berth/Chart.yaml')) as { appVersion: string }).appVersion;
  const node = testedNodeVersion();

  it('are the three Berth images, each published where the chart pulls it from', () => {
    expect(images.map((i) => i.image)).toEqual(['berth-api', 'berth-operator', 'berth-engine-sim']);
    expect(values.api.image.repository).toBe('ghcr.io/berth-dev/berth-api');
    expect(values.operator.image.repository).toBe('ghcr.io/berth-dev/berth-operator');
    // The try-out's engine image is the simulator of the same release.
    expect(cpuOnly.operator.engineImage).toBe(`ghcr.io/berth-dev/berth-engine-sim:${appVersion}`);
  });

  it('the release builds on the Node version CI tests with', () => {
    const wf = parse(readFileSync(releaseWorkflow, 'utf8')) as {
      jobs: { verify: { steps: { uses?: string; with?: { 'node-version'?: unknown } }[] } };
    };
    const setup = wf.jobs.verify.steps.find((s) => s.uses?.startsWith('actions/setup-node@'));
    expect(String(setup?.with?.['node-version'])).toBe(node);
  });

  it('pins every action of the release workflow to a commit', () => {
    const uses = [...readFileSync(releaseWorkflow, 'utf8').matchAll(/uses:\s*(\S+)/g)].map((m) => m[1]!);
    expect(uses.length).toBeGreaterThan(5);
    for (const u of uses) expect(u, u).toMatch(/^[\w.-]+\/[\w.-]+@[0-9a-f]{40}$/);
  });

  for (const img of images) {
    describe(img.image, () => {
      const stages = stagesOf(parseDockerfile(read(img.file)));
      const final = stages.at(-1)!;
      const stageNames = new Set(stages.map((s) => s.name));

      it(`pins its base images to an exact version (or digest) of Node ${node}`, () => {
        for (const s of stages.filter((s) => !stageNames.has(s.base))) {
          expect(s.base, `line ${s.line}`).toMatch(
            /^[\w./-]+:[\w.-]+(@sha256:[0-9a-f]{64})?$|^[\w./-]+@sha256:[0-9a-f]{64}$/,
          );
          expect(s.base, `line ${s.line}`).toMatch(
            new RegExp(`^node:${node.replaceAll('.', '\\.')}-[a-z]+(@sha256:[0-9a-f]{64})?$`),
          );
        }
      });

      it('runs as a numeric non-root user: the chart runs its pods with runAsNonRoot', () => {
        const user = last(final, 'USER')?.args;
        expect(user).toMatch(/^\d+(:\d+)?$/);
        const [uid, gid] = user!.split(':').map(Number);
        expect(uid).not.toBe(0);
        if (img.image !== 'berth-engine-sim') {
          // Engine pods are built by the operator, which sets no user; the chart's pods run as this one.
          expect(uid).toBe(values.podSecurityContext.runAsUser);
          expect(gid).toBe(values.podSecurityContext.runAsGroup);
        }
      });

      it("starts the workspace's own entry point (its package.json start script)", () => {
        const entrypoint = last(final, 'ENTRYPOINT')?.exec;
        expect(entrypoint?.[0]).toBe('node');
        const workdir = last(final, 'WORKDIR')?.args ?? '/';
        expect(entrypoint?.at(-1)).toBe(expectedEntry(img, workdir));
        expect(workspaceOf(img).name).toMatch(/^@berth\//);
      });

      it('exposes the port the chart or the operator sends traffic and probes to', () => {
        const expose = final.instructions.filter((i) => i.keyword === 'EXPOSE').map((i) => Number(i.args));
        const want = {
          'berth-api': Number(
            /containerPort: (\d+)/.exec(read('charts/berth/templates/api-deployment.yaml'))![1],
          ),
          'berth-operator': values.operator.metricsPort,
          'berth-engine-sim': ENGINE_PORT,
        }[img.image];
        expect(expose).toEqual([want]);
        const cmd = last(final, 'CMD')?.exec;
        if (cmd?.includes('--port')) expect(cmd[cmd.indexOf('--port') + 1]).toBe(String(want));
      });

      it('has a .dockerignore for its build context that keeps out node_modules, local data and tests', () => {
        const ignore = ignoreFileFor(join(repoRoot, img.file), join(repoRoot, img.context));
        expect(ignore, `${img.context}/.dockerignore`).toBeDefined();
        const excluded = dockerignore(ignore);
        for (const p of [
          'node_modules/x/index.js',
          '.data/db',
          '.env',
          'src/x.test.ts',
          'prisma/src/generated/client.ts',
        ])
          expect(excluded(p), p).toBe(true);
      });
    });
  }
});
