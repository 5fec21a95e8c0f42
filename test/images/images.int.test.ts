// Each image of the release workflow built without Docker (test/images/emulate.ts: the files every
// COPY really finds in the build context and earlier stages, the RUN checks run as written), then:
// every module its entry point loads is in the image, and the image's entry point, started from
// the image's own files with the settings the chart (or, for engines, the operator) gives it,
// serves the probe paths the chart and the operator point at it. What is not modelled: the base
// image's own files and the target architecture.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { API_VERSION, DEFAULT_CATALOG, DedicatedEndpointSchema, KIND } from '@berth/crds';
import { desiredDeployment } from '@berth/operator';
import type { V1Container, V1Probe } from '@kubernetes/client-node';
import { chartDir, DB_URL, helmOk } from '../../charts/test/helm.ts';
import { installCrd } from '../support/operator.ts';
import { kubeconfigPath, testNamespace } from '../cluster/env.ts';
import { eventually } from '../support/eventually.ts';
import { createTestDatabase, type TestDatabase } from '../support/postgres.ts';
import { emulateBuild, type EmulatedImage } from './emulate.ts';
import { moduleGraph, urlReferences } from './graph.ts';
import { releaseImages, repoRoot } from './images.ts';

const images = releaseImages();
const built = new Map<string, EmulatedImage>();
let work: string;
const children: ChildProcess[] = [];

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'berth-images-'));
});
afterAll(async () => {
  await Promise.all(children.map(stop));
  rmSync(work, { recursive: true, force: true });
});

function image(name: string): EmulatedImage {
  const img = built.get(name);
  if (!img) throw new Error(`${name} was not built (see the build test's failure)`);
  return img;
}

describe.each(images)('$image ($file, context $context)', (spec) => {
  it('builds without Docker: every COPY finds its files, every RUN step passes', () => {
    built.set(spec.image, emulateBuild(repoRoot, spec, join(work, spec.image)));
  }, 180_000);

  it('holds every module its entry point loads, and every file those modules name at run time', () => {
    const img = image(spec.image);
    const script = img.entrypoint!.find((a) => a.startsWith('/'))!;
    const graph = moduleGraph(img.root, script);
    expect(graph.missing).toEqual([]);
    expect(graph.files.length).toBeGreaterThan(3);
    for (const ref of urlReferences(img.root, graph.files))
      expect(existsSync(join(img.root, ref.target)), `${ref.file} names ${ref.target}`).toBe(true);
  });
});

interface Manifest {
  kind: string;
  metadata: { name: string };
  data?: Record<string, string>;
  spec?: { template: { spec: { containers: V1Container[] } } };
}

/** A container's environment as the kubelet would give it: Secret and ConfigMap references resolved. */
function resolvedEnv(docs: Manifest[], c: V1Container): Record<string, string> {
  const find = (kind: string, name = '') => docs.find((d) => d.kind === kind && d.metadata.name === name);
  const env: Record<string, string> = {};
  for (const e of c.env ?? []) {
    const secret = e.valueFrom?.secretKeyRef;
    const config = e.valueFrom?.configMapKeyRef;
    if (secret)
      env[e.name] = Buffer.from(find('Secret', secret.name)!.data![secret.key]!, 'base64').toString();
    else if (config) env[e.name] = find('ConfigMap', config.name)!.data![config.key]!;
    else env[e.name] = e.value ?? '';
  }
  return env;
}

/** Starts an image's ENTRYPOINT (+ args) from its files; resolves with the first match of `ready` in its output. */
function startImage(img: EmulatedImage, args: string[], env: Record<string, string>, ready: RegExp) {
  const [cmd, ...entry] = img.entrypoint!;
  expect(cmd).toBe('node');
  const argv = entry.map((a) => (a.startsWith('/') ? join(img.root, a) : a));
  const child = spawn(process.execPath, [...argv, ...args], {
    cwd: join(img.root, img.workdir),
    env: { PATH: process.env.PATH, ...img.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '';
  return new Promise<{ match: RegExpExecArray; output: () => string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${ready} within 60 s:\n${out}`)), 60_000);
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = ready.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ match: m, output: () => out });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`exited with ${code}:\n${out}`));
    });
  });
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

const probePaths = (c: V1Container) =>
  [c.startupProbe, c.readinessProbe, c.livenessProbe]
    .filter((p): p is V1Probe => !!p?.httpGet)
    .map((p) => p.httpGet!.path!);

async function expectProbesOk(base: string, paths: string[]) {
  expect(paths.length).toBeGreaterThan(0);
  for (const path of new Set(paths))
    await eventually(async () => expect((await fetch(base + path)).status, path).toBe(200), {
      description: `${base}${path} answers 200`,
      timeout: 60_000,
    });
}

describe("started from the image's files, configured as the chart (or the operator) configures it", () => {
  let ns: Awaited<ReturnType<typeof testNamespace>>;
  let db: TestDatabase;
  let docs: Manifest[];
  let catalogFile: string;
  let modelsFile: string;

  beforeAll(async () => {
    await installCrd();
    ns = await testNamespace('images');
    db = await createTestDatabase('images');
    const manifest = await helmOk([
      'template',
      'berth',
      chartDir,
      '--namespace',
      ns.name,
      '--set',
      `database.url=${DB_URL}`,
    ]);
    docs = parseAllDocuments(manifest)
      .map((d) => d.toJS() as Manifest)
      .filter(Boolean);
    // The ConfigMap volume the chart mounts at /etc/berth.
    catalogFile = join(work, 'catalog.yaml');
    writeFileSync(
      catalogFile,
      docs.find((d) => d.kind === 'ConfigMap' && d.data?.['catalog.yaml'])!.data!['catalog.yaml']!,
    );
    // …and the Elastic catalog file in the same ConfigMap.
    modelsFile = join(work, 'models.yaml');
    writeFileSync(
      modelsFile,
      docs.find((d) => d.kind === 'ConfigMap' && d.data?.['models.yaml'] !== undefined)!.data![
        'models.yaml'
      ]!,
    );
  }, 120_000);

  afterAll(async () => {
    await Promise.all(children.map(stop));
    await db?.drop();
    await ns?.remove();
  });

  const container = (deployment: string) =>
    docs.find((d) => d.kind === 'Deployment' && d.metadata.name === deployment)!.spec!.template.spec
      .containers[0]!;

  it("berth-api serves the chart's probes and has applied the migrations it ships", async () => {
    const img = image('berth-api');
    const c = container('berth-api');
    const env = {
      ...resolvedEnv(docs, c),
      // What the cluster would provide otherwise: a reachable database, a port to bind here, the
      // mounted catalog, credentials for the API server.
      DATABASE_URL: db.url,
      HOST: '127.0.0.1',
      PORT: '0',
      BERTH_CATALOG_FILE: catalogFile,
      BERTH_MODELS_FILE: modelsFile,
      KUBECONFIG: kubeconfigPath(),
    };
    const { match } = await startImage(img, [], env, /"port":(\d+)[^\n]*Berth API listening/);
    await expectProbesOk(`http://127.0.0.1:${match[1]}`, probePaths(c));

    const shipped = readdirSync(join(img.root, img.workdir, 'prisma', 'migrations'), {
      withFileTypes: true,
    }).filter((e) => e.isDirectory()).length;
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const { rows } = await client.query(
        'SELECT count(*)::int AS n FROM _prisma_migrations WHERE finished_at IS NOT NULL',
      );
      expect(shipped).toBeGreaterThan(0);
      expect(rows[0].n).toBe(shipped);
    } finally {
      await client.end();
    }
  }, 120_000);

  it("berth-operator serves the chart's probes", async () => {
    const img = image('berth-operator');
    const c = container('berth-operator');
    const env = {
      ...resolvedEnv(docs, c),
      BERTH_METRICS_PORT: '0',
      BERTH_CATALOG_FILE: catalogFile,
      KUBECONFIG: kubeconfigPath(),
    };
    const { match } = await startImage(img, [], env, /"metricsPort":(\d+)[^\n]*operator started/);
    await expectProbesOk(`http://127.0.0.1:${match[1]}`, probePaths(c));
  }, 120_000);

  it("berth-engine-sim, run with the operator's container arguments, serves the operator's engine probes", async () => {
    const img = image('berth-engine-sim');
    const ep = DedicatedEndpointSchema.parse({
      apiVersion: API_VERSION,
      kind: KIND,
      metadata: { name: 'endpt-image', namespace: ns.name, generation: 1, uid: 'u-image' },
      spec: {
        account: 'acct_1',
        model: { id: 'org/small' },
        hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
        // Appended by the operator after its own --host/--port: bind here, on a free port.
        engine: { args: ['--host', '127.0.0.1', '--port', '0'] },
      },
    });
    const type = DEFAULT_CATALOG.instanceTypes.find((t) => t.id === 'nvidia-h100-80gb')!;
    const deployment = desiredDeployment(
      ep,
      type,
      {
        engineImage: 'x',
        startupTimeoutSeconds: 60,
        drainSeconds: 1,
        terminationGracePeriodSeconds: 5,
        modelCache: { kind: 'emptyDir' },
      },
      1,
    );
    const c = deployment.spec!.template.spec!.containers[0]!;
    expect(c.command).toBeUndefined(); // the image's ENTRYPOINT runs, with the container's args
    const env = Object.fromEntries(
      (c.env ?? []).filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]),
    );
    const { match } = await startImage(
      img,
      c.args ?? [],
      env,
      /Starting vLLM API server 0 on (http:\/\/[\d.]+:\d+)[\s\S]*Application startup complete\./,
    );
    await expectProbesOk(match[1]!, probePaths(c));
  }, 120_000);
});
