// The local workload driver with real child processes: the engine simulator, and a process that
// keeps crashing.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_CATALOG, DedicatedEndpointSchema, type DedicatedEndpoint } from '@berth/crds';
import { pino } from 'pino';
import { cliPath } from '@berth/engine-sim';
import { eventually } from '@berth/test/support/eventually';
import { processDriver, type ProcessDriverOptions } from '../src/local/driver.ts';
import { logFiles } from '../src/local/logfiles.ts';

const it4 = DEFAULT_CATALOG.instanceTypes.find((t) => t.id === 'nvidia-l4-24gb')!;
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function endpoint(id: string): DedicatedEndpoint {
  return DedicatedEndpointSchema.parse({
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'DedicatedEndpoint',
    metadata: { name: id, namespace: 'local', generation: 1 },
    spec: { account: 'a', model: { id: 'org/model' }, hardware: { gpuType: it4.id, gpuCount: 1 } },
  });
}

function driver(overrides: Partial<ProcessDriverOptions> = {}) {
  const dir = mkdtempSync(path.join(tmpdir(), 'berth-local-'));
  const logs = logFiles(path.join(dir, 'logs'), 64 * 1024);
  const changes: string[] = [];
  const d = processDriver({
    engine: { command: process.execPath, prefix: [cliPath] },
    extraArgs: ['--ttft-ms', '0', '--itl-ms', '0'],
    runDir: path.join(dir, 'run'),
    logs,
    log: pino({ level: 'silent' }),
    crashLoopRestarts: 2,
    stopGraceMs: 5000,
    startupPollMs: 50,
    restartDelayMs: 50,
    onChange: (id) => changes.push(id),
    ...overrides,
  });
  cleanups.push(async () => {
    await d.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { d, logs, dir, changes };
}

describe('local process driver', () => {
  it('starts a replica, reports it ready once /health answers, serves it, and stops it gracefully', async () => {
    const { d, logs, changes } = driver({ extraArgs: ['--startup-delay-ms', '300'] });
    const ep = endpoint('endpt-a');
    const seen: Array<readonly string[]> = [];
    d.watchAddresses('endpt-a', (a) => seen.push(a));
    await d.apply(ep, it4, 1);
    const starting = await d.observe(ep);
    expect(starting).toMatchObject({ replicas: 1, readyReplicas: 0 });
    // Its start as a pod's would read, for the wake receipt: this machine is its node.
    expect(starting.starts).toEqual([expect.objectContaining({ pod: 'endpt-a-0' })]);
    expect(starting.starts![0]!.readyAt).toBeUndefined();
    await eventually(async () => (await d.observe(ep)).readyReplicas === 1, { timeout: 10_000 });
    const up = await d.observe(ep);
    const start = up.starts![0]!;
    expect(Date.parse(start.readyAt!)).toBeGreaterThanOrEqual(Date.parse(start.runningAt!) + 300);
    expect(start).toMatchObject({ pod: 'endpt-a-0', node: hostname(), scheduledAt: start.runningAt });
    expect(Date.parse(start.runningAt!)).toBeGreaterThanOrEqual(Date.parse(start.createdAt));
    expect(up.nodes).toEqual([{ name: hostname(), readyAt: start.readyAt }]);
    const [url] = d.addresses('endpt-a');
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(seen).toEqual([[url]]);
    expect(d.url(ep)).toBe(url);
    expect(changes).toContain('endpt-a');
    const models = await (await fetch(`${url}/v1/models`)).json();
    expect(models.data[0].id).toBe('org/model');

    const pid = Number(/starting \(pid (\d+)/.exec(await logs.read('endpt-a'))![1]);
    await d.apply(ep, it4, 0); // hibernate: resolves once the process has exited
    expect(seen.at(-1)).toEqual([]);
    expect(await d.observe(ep)).toEqual({ replicas: 0, readyReplicas: 0 });
    expect(() => process.kill(pid, 0)).toThrow();
    const log = await logs.read('endpt-a');
    expect(log).toMatch(/Received SIGTERM; draining/);
    expect(log).toMatch(/replica 0 exited \(exit code 0\)/);
  }, 30_000);

  it('an engine that runs out of GPU memory is OutOfMemory at once, not restarted; its output is in the log', async () => {
    const { d, logs } = driver({ extraArgs: ['--fail-startup', 'oom'] });
    const ep = endpoint('endpt-oom');
    await d.apply(ep, it4, 1);
    const observed = await eventually(
      async () => {
        const o = await d.observe(ep);
        return o.failure ? o : false;
      },
      { timeout: 10_000 },
    );
    expect(observed).toMatchObject({ replicas: 0, readyReplicas: 0, failure: { kind: 'OutOfMemory' } });
    expect(observed.failure!.message).toMatch(/CUDA out of memory/);
    const log = await logs.read('endpt-oom');
    expect(log).toMatch(/torch\.OutOfMemoryError: CUDA out of memory/);
    expect(log).not.toMatch(/restarts in/);
  }, 30_000);

  it('a process that keeps exiting is restarted with back-off, then is a CrashLoop', async () => {
    const { d, logs } = driver({
      engine: {
        command: process.execPath,
        prefix: ['-e', 'console.error("engine: bad config"); process.exit(3)'],
      },
    });
    const ep = endpoint('endpt-crash');
    await d.apply(ep, it4, 1);
    const observed = await eventually(
      async () => {
        const o = await d.observe(ep);
        return o.failure ? o : false;
      },
      { timeout: 10_000 },
    );
    expect(observed.failure).toEqual({
      kind: 'CrashLoop',
      message: 'The engine process keeps exiting (2 restarts, exit code 3: engine: bad config).',
    });
    expect((await logs.read('endpt-crash')).match(/exited \(exit code 3\)/g)).toHaveLength(3);
  }, 30_000);

  it('runs one process per replica and scales down from the top', async () => {
    const { d } = driver();
    const ep = endpoint('endpt-two');
    await d.apply(ep, it4, 2);
    await eventually(async () => (await d.observe(ep)).readyReplicas === 2, { timeout: 10_000 });
    expect(new Set(d.addresses('endpt-two')).size).toBe(2);
    await d.apply(ep, it4, 1);
    await eventually(async () => (await d.observe(ep)).replicas === 1, { timeout: 10_000 });
    expect(d.addresses('endpt-two')).toHaveLength(1);
    await d.remove('endpt-two');
    expect(d.addresses('endpt-two')).toEqual([]);
  }, 30_000);

  it('rotates a log file past its size', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'berth-logs-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const logs = logFiles(dir, 100);
    logs.write('endpt-x', 'a'.repeat(80) + '\n');
    logs.write('endpt-x', 'b'.repeat(80) + '\n');
    logs.write('endpt-x', 'c'.repeat(10) + '\n');
    expect(readFileSync(path.join(dir, 'endpt-x.log.1'), 'utf8')).toBe(
      'a'.repeat(80) + '\n' + 'b'.repeat(80) + '\n',
    );
    expect(await logs.read('endpt-x')).toBe(['a'.repeat(80), 'b'.repeat(80), 'c'.repeat(10), ''].join('\n'));
    logs.remove('endpt-x');
    expect(await logs.read('endpt-x')).toBe('');
  });
});
