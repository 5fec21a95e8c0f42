// Dedicated GPU time on the real control plane, the example: an L4 endpoint up 2 h,
// hibernated 1 h, up 30 min across a week boundary, then terminated — with the API SIGKILLed while it
// runs and the endpoint deleted while no API is there — is invoiced 2.5 h, split over the two weeks.
// The operator, the scheduler and kwok run on real time; the API runs as a child process whose
// billing clock the test moves (test/support/clocked-api.ts), so hours pass in seconds.
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { OperatorHandle } from '@berth/operator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  kubeconfigPath,
  kubectl,
  kubectlJson,
  kubectlOk,
  loadKubeConfig,
  testNamespace,
} from '../../cluster/env.ts';
import { ADMIN_TOKEN, bearer, listeningPort } from '../../support/api.ts';
import { eventually } from '../../support/eventually.ts';
import { startFakeHub } from '../../support/fake-hub.ts';
import { installCrd, start, testConfig } from '../../support/operator.ts';
import { servePodEngines, type PodEngines } from '../../support/pod-engines.ts';
import { createTestDatabase, type TestDatabase } from '../../support/postgres.ts';
import { gpuIntervals, gpuMeterRow } from '../../support/gpu-meter.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const MIN = 60_000;
const HOUR = 60 * MIN;
/** Monday 00:00 UTC: the week boundary the last 30 minutes cross. */
const W = Date.parse('2026-11-30T00:00:00Z');
const T0 = W - 3 * HOUR - 15 * MIN; // Sunday 20:45

let ns: Awaited<ReturnType<typeof testNamespace>>;
let hub: Awaited<ReturnType<typeof startFakeHub>>;
let op: OperatorHandle;
let engines: PodEngines;
let db: TestDatabase;
const children: ChildProcess[] = [];

interface ClockedApi {
  url: string;
  child: ChildProcess;
  /** Moves the API's clock; resolves once it has. */
  clock(m: { frozen: number } | { offset: number }): Promise<void>;
  send(job: string): Promise<void>;
  output(): string;
}

async function spawnClockedApi(clock: Record<string, string>): Promise<ClockedApi> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/support/clocked-api.ts'], {
    cwd: root,
    env: {
      ...process.env,
      PORT: '0',
      LOG_LEVEL: 'info',
      DATABASE_URL: db.url,
      ADMIN_TOKEN,
      KUBECONFIG: kubeconfigPath(),
      BERTH_NAMESPACE: ns.name,
      BILLING_GPU_SYNC_INTERVAL_MS: '300',
      WAKE_HOLD_TIMEOUT_MS: '90000',
      ...clock,
    },
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  children.push(child);
  const { port, output } = await listeningPort(child);
  const ask = (m: object) =>
    new Promise<void>((resolve) => {
      child.once('message', () => resolve());
      child.send(m);
    });
  return {
    url: `http://127.0.0.1:${port}`,
    child,
    clock: ask,
    send: (job) => ask({ send: job }),
    output,
  };
}

const meter = (id: string) => gpuMeterRow(db.url, id);
const intervals = (id: string) => gpuIntervals(db.url, id);
const iso = (ms: number) => new Date(ms).toISOString();

async function resource(id: string) {
  const r = await kubectl(['get', 'dedicatedendpoint', id, '-n', ns.name, '-o', 'json']);
  return r.code === 0
    ? (JSON.parse(r.stdout) as { metadata: { finalizers?: string[]; deletionTimestamp?: string } })
    : undefined;
}

beforeAll(async () => {
  await installCrd();
  ns = await testNamespace('e2e-gpu-billing');
  hub = await startFakeHub();
  op = await start(testConfig(ns.name, hub.url, { leaderElection: false, provisioningTimeoutSeconds: 120 }));
  engines = await servePodEngines(loadKubeConfig(), ns.name);
  db = await createTestDatabase('gpu-billing');
}, 180_000);

async function stopChildren() {
  const running = children.splice(0).filter((c) => c.exitCode === null && c.signalCode === null);
  for (const c of running) c.kill('SIGTERM');
  await Promise.all(running.map((c) => new Promise((r) => c.once('exit', r))));
}

afterAll(async () => {
  await stopChildren();
  // Whatever a failed test left: without an API, the billing finalizer would hold it.
  const left = await kubectlJson<{ items: { metadata: { name: string } }[] }>([
    'get',
    'dedicatedendpoints',
    '-n',
    ns.name,
    '-o',
    'json',
  ]).catch(() => ({ items: [] }));
  for (const e of left.items)
    await kubectl([
      'patch',
      'dedicatedendpoint',
      e.metadata.name,
      '-n',
      ns.name,
      '--type=merge',
      '-p',
      '{"metadata":{"finalizers":[]}}',
    ]);
  await engines?.close();
  await op?.stop();
  await hub?.close();
  await ns?.remove();
  await db?.drop();
}, 120_000);

describe('dedicated GPU time, metered from the cluster and invoiced weekly', () => {
  it('up 2 h, hibernated 1 h, up 30 min across a week boundary, terminated with the API down: 2.5 h over two weeks', async () => {
    let api = await spawnClockedApi({ TEST_CLOCK_FROZEN: String(T0) });
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };
    const account = (await (
      await fetch(api.url + '/admin/accounts', { method: 'POST', headers: admin, body: '{"name":"gpu"}' })
    ).json()) as { account: { id: string }; key: { value: string } };
    const global = (await (
      await fetch(`${api.url}/admin/accounts/${account.account.id}/keys`, {
        method: 'POST',
        headers: admin,
        body: '{"name":"global","scope":"global"}',
      })
    ).json()) as { value: string };
    const key = global.value;
    const json = { ...bearer(key), 'content-type': 'application/json' };

    const created = await fetch(api.url + '/api/endpoints', {
      method: 'POST',
      headers: json,
      body: JSON.stringify({
        model: 'org/small',
        hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 1 },
        scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 15 },
      }),
    });
    expect(created.status).toBe(201);
    const id = ((await created.json()) as { id: string }).id;
    // Created with the API's finalizer and the operator's.
    await eventually(async () =>
      expect((await resource(id))?.metadata.finalizers?.sort()).toEqual([
        'berth.dev/billing',
        'berth.dev/finalizer',
      ]),
    );

    // Up at T0: the replica is metered from the moment the API saw it scheduled.
    await eventually(
      async () => expect(await meter(id)).toMatchObject({ replicas: 1, opened_at: new Date(T0) }),
      {
        timeout: 90_000,
      },
    );
    // Two hours later (the heartbeat records that it still runs), it goes idle and hibernates.
    await api.clock({ frozen: T0 + 2 * HOUR });
    await eventually(async () =>
      expect((await meter(id))!.last_observed_at).toEqual(new Date(T0 + 2 * HOUR)),
    );
    await eventually(async () => expect(await meter(id)).toMatchObject({ replicas: 0, opened_at: null }), {
      timeout: 90_000,
    });
    expect(await intervals(id)).toEqual([[1, iso(T0), iso(T0 + 2 * HOUR)]]);

    // An hour asleep costs nothing; a request wakes it at T0 + 3 h.
    await api.clock({ frozen: T0 + 3 * HOUR });
    await eventually(async () =>
      expect((await meter(id))!.last_observed_at).toEqual(new Date(T0 + 3 * HOUR)),
    );
    const woken = await fetch(`${api.url}/api/d/${id}/chat/completions`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({
        model: 'org/small',
        messages: [{ role: 'user', content: 'wake up' }],
        max_tokens: 4,
      }),
    });
    expect(woken.status).toBe(200);
    await eventually(async () =>
      expect(await meter(id)).toMatchObject({ replicas: 1, opened_at: new Date(T0 + 3 * HOUR) }),
    );

    // The API is killed while the endpoint runs, and the endpoint is deleted while no API is there.
    api.child.kill('SIGKILL');
    await new Promise((r) => api.child.once('exit', r));
    await kubectlOk(['delete', 'dedicatedendpoint', id, '-n', ns.name, '--wait=false']);
    // The operator lets go; the API's finalizer holds the endpoint until its record is closed.
    const held = await eventually(async () => {
      const r = await resource(id);
      expect(r?.metadata.finalizers).toEqual(['berth.dev/billing']);
      return r!;
    });
    expect((await meter(id))!.terminated_at).toBeNull();

    // The API comes back; its clock says the deletion happened at W + 15 min (Monday 00:15).
    const deletedAt = Date.parse(held.metadata.deletionTimestamp!);
    api = await spawnClockedApi({ TEST_CLOCK_OFFSET: String(W + 15 * MIN - deletedAt) });
    await eventually(async () => expect(await resource(id)).toBeUndefined(), { timeout: 30_000 });
    expect(await meter(id)).toMatchObject({ replicas: 0, terminated_at: new Date(W + 15 * MIN) });
    expect(await intervals(id)).toEqual([
      [1, iso(T0), iso(T0 + 2 * HOUR)],
      [1, iso(T0 + 3 * HOUR), iso(W + 15 * MIN)],
    ]);

    // The running week, as the upcoming invoice: the 15 minutes after Monday 00:00.
    const upcoming = (await (
      await fetch(api.url + '/api/billing/invoices', { headers: bearer(key) })
    ).json()) as {
      data: unknown[];
      upcoming: {
        periodStart: string;
        total: string;
        lines: { endpointId: string; hours: string; amount: string }[];
      };
    };
    expect(upcoming.data).toEqual([]);
    expect(upcoming.upcoming).toMatchObject({
      periodStart: iso(W),
      total: '0.200000',
      lines: [
        {
          endpointId: id,
          gpuType: 'NVIDIA L4 24GB',
          gpuCount: 1,
          hours: '0.250000',
          ratePerGpuHour: '0.800000',
          amount: '0.200000',
        },
      ],
    });

    // A week later the weekly job issues both weeks: 2 h 15 min before the boundary, 15 min after.
    await api.clock({ frozen: W + 7 * 24 * HOUR + HOUR });
    await api.send('billing-weekly-invoices');
    const issued = await eventually(async () => {
      const body = (await (
        await fetch(api.url + '/api/billing/invoices', { headers: bearer(key) })
      ).json()) as {
        data: { id: string; periodStart: string; total: string }[];
      };
      expect(body.data).toHaveLength(2);
      return body.data;
    });
    expect(issued.map((i) => [i.periodStart, i.total])).toEqual([
      [iso(W), '0.200000'],
      [iso(W - 7 * 24 * HOUR), '1.800000'],
    ]);
    const first = (await (
      await fetch(`${api.url}/api/billing/invoices/${issued[1]!.id}`, { headers: bearer(key) })
    ).json()) as {
      lines: unknown[];
    };
    expect(first.lines).toEqual([
      {
        endpointId: id,
        instanceType: 'nvidia-l4-24gb',
        gpuType: 'NVIDIA L4 24GB',
        gpuCount: 1,
        hours: '2.250000',
        gpuHours: '2.250000',
        ratePerGpuHour: '0.800000',
        amount: '1.800000',
      },
    ]);
    api.child.kill('SIGTERM');
    await new Promise((r) => api.child.once('exit', r));
  }, 300_000);

  it('two API replicas: one meters; killed, the other takes over; a kubectl-applied endpoint gets the finalizer and is closed at its deletion', async () => {
    // An API the previous test left running (it failed before stopping it) would hold the lease.
    await stopChildren();
    const T = Date.parse('2026-12-08T10:00:00Z');
    const replicas = [
      await spawnClockedApi({ TEST_CLOCK_FROZEN: String(T) }),
      await spawnClockedApi({ TEST_CLOCK_FROZEN: String(T) }),
    ];
    const leading = async (a: ClockedApi) =>
      /^berth_gpu_meter_leader 1$/m.test(await (await fetch(a.url + '/metrics')).text());
    const leader = await eventually(async () => {
      const flags = await Promise.all(replicas.map(leading));
      expect(flags.filter(Boolean)).toHaveLength(1);
      return replicas[flags.indexOf(true)]!;
    });
    const standby = replicas.find((r) => r !== leader)!;

    const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };
    const account = (await (
      await fetch(standby.url + '/admin/accounts', {
        method: 'POST',
        headers: admin,
        body: '{"name":"kubectl"}',
      })
    ).json()) as { account: { id: string } };
    const id = `endpt-kubectl${Date.now().toString(36)}`;
    await kubectlOk(['apply', '-f', '-'], {
      input: JSON.stringify({
        apiVersion: 'berth.dev/v1alpha1',
        kind: 'DedicatedEndpoint',
        metadata: { name: id, namespace: ns.name },
        spec: {
          account: account.account.id,
          model: { id: 'org/small' },
          hardware: { gpuType: 'nvidia-l4-24gb', gpuCount: 2 },
          scaling: { minReplicas: 1, maxReplicas: 1, idleTimeoutSeconds: 600 },
        },
      }),
    });
    // Not created through the API: the meter adds the API's finalizer.
    await eventually(async () =>
      expect((await resource(id))?.metadata.finalizers).toContain('berth.dev/billing'),
    );
    await eventually(
      async () => expect(await meter(id)).toMatchObject({ replicas: 1, opened_at: new Date(T) }),
      {
        timeout: 90_000,
      },
    );

    leader.child.kill('SIGKILL');
    await standby.clock({ frozen: T + HOUR });
    await eventually(() => leading(standby), { timeout: 20_000 });
    await eventually(async () => expect((await meter(id))!.last_observed_at).toEqual(new Date(T + HOUR)));

    await kubectlOk(['delete', 'dedicatedendpoint', id, '-n', ns.name, '--wait=true', '--timeout=60s']);
    expect(await meter(id)).toMatchObject({ replicas: 0, terminated_at: new Date(T + HOUR) });
    expect(await intervals(id)).toEqual([[1, iso(T), iso(T + HOUR)]]);
    const invoices = (await (
      await fetch(`${standby.url}/admin/accounts/${account.account.id}/billing/invoices`, { headers: admin })
    ).json()) as { upcoming: { lines: { gpuHours: string; amount: string }[] } };
    expect(invoices.upcoming.lines).toMatchObject([{ gpuHours: '2.000000', amount: '1.600000' }]);
  }, 240_000);
});
