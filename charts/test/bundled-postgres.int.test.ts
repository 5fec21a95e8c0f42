// The one-command try-out (values-cpu-only.yaml with the bundled PostgreSQL) installed into the local
// control plane. kwok fakes pods and there is no volume provisioner, so the database pod never runs
// and its PVC stays Pending: what is asserted is what the chart and Kubernetes controllers do with
// the objects — created, wired to each other, kept or removed on upgrade and uninstall.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kubectl, kubectlJson, kubectlOk, testNamespace } from '@berth/test/cluster/env';
import { eventually } from '@berth/test/support/eventually';
import { chartDir, cpuOnlyValues, helm, helmOk } from './helm.ts';

interface Meta {
  name: string;
  uid: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: { kind: string; name: string; uid: string }[];
  deletionTimestamp?: string;
}
interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name: string; key: string } };
}
interface Container {
  name: string;
  image: string;
  command?: string[];
  env?: EnvVar[];
}

let ns: Awaited<ReturnType<typeof testNamespace>>;
let work: string;
const releases: string[] = [];

beforeAll(async () => {
  ns = await testNamespace('chart-pg');
  work = mkdtempSync(join(tmpdir(), 'berth-chart-'));
});
afterAll(async () => {
  for (const r of releases)
    await helm(['uninstall', r, '--namespace', ns.name, '--ignore-not-found'], { cluster: true });
  await ns?.remove();
  rmSync(work, { recursive: true, force: true });
});

const get = <T>(kind: string, name: string) => kubectlJson<T>(['get', kind, name], { namespace: ns.name });
const exists = async (kind: string, name: string) =>
  (await kubectl(['get', kind, name, '-o', 'name'], { namespace: ns.name })).code === 0;
const decode = (b64: string | undefined) => Buffer.from(b64 ?? '', 'base64').toString();

async function install(release: string, args: string[]) {
  releases.push(release);
  // No --wait: the database pod cannot start without a volume provisioner.
  await helmOk(['install', release, chartDir, '--namespace', ns.name, ...args], {
    cluster: true,
    timeoutMs: 120_000,
  });
}

async function uninstall(release: string) {
  await helmOk(['uninstall', release, '--namespace', ns.name, '--wait', '--timeout', '2m'], {
    cluster: true,
    timeoutMs: 150_000,
  });
}

/** The PVC the StatefulSet controller creates for the one database pod, once it exists. */
function claimOf(release: string) {
  const name = `data-${release}-postgresql-0`;
  return eventually(() => get<{ metadata: Meta; status: { phase: string } }>('pvc', name), {
    description: `PVC ${name}`,
  });
}

describe('bundled PostgreSQL (database.bundled) on the local control plane', () => {
  it('the try-out installs with one command; the API is wired to the bundled database; the password survives an upgrade to a new chart version; uninstall removes the StatefulSet and its PVC', async () => {
    // The release name contains "berth", so object names are <release>-…
    const release = 'berth-try';
    const db = `${release}-postgresql`;
    await install(release, ['-f', cpuOnlyValues]);

    // StatefulSet of the official image, deleting its claims with it (the documented default).
    const sts = await get<{
      metadata: Meta;
      spec: {
        serviceName: string;
        persistentVolumeClaimRetentionPolicy: { whenDeleted: string; whenScaled: string };
        template: { metadata: { labels: Record<string, string> }; spec: { containers: Container[] } };
      };
    }>('statefulset', db);
    expect(sts.spec.serviceName).toBe(db);
    expect(sts.spec.persistentVolumeClaimRetentionPolicy).toEqual({
      whenDeleted: 'Delete',
      whenScaled: 'Retain',
    });
    const pgContainer = sts.spec.template.spec.containers[0]!;
    expect(pgContainer.image).toBe('postgres:17.6');
    expect(pgContainer.env?.find((e) => e.name === 'POSTGRES_PASSWORD')?.valueFrom?.secretKeyRef).toEqual({
      name: db,
      key: 'password',
    });

    // Its PVC: created by the StatefulSet controller, owned by the StatefulSet (so garbage-collected
    // with it), Pending without a provisioner, as is the pod that needs it. The controller creates the
    // claim first and adds the owner reference (whenDeleted: Delete) in a later update.
    const pvc = await eventually(
      async () => {
        const claim = await claimOf(release);
        expect(claim.metadata.ownerReferences).toEqual([
          expect.objectContaining({ kind: 'StatefulSet', name: db, uid: sts.metadata.uid }),
        ]);
        return claim;
      },
      { description: 'the PVC owned by the StatefulSet' },
    );
    expect(pvc.status.phase).toBe('Pending');
    const pod = await eventually(() =>
      get<{ status: { phase: string; conditions?: { type: string; reason?: string; message?: string }[] } }>(
        'pod',
        `${db}-0`,
      ),
    );
    expect(pod.status.phase).toBe('Pending');

    // The Service selects the database pod.
    const svc = await get<{ spec: { selector: Record<string, string>; ports: { port: number }[] } }>(
      'service',
      db,
    );
    expect(svc.spec.ports.map((p) => p.port)).toEqual([5432]);
    for (const [k, v] of Object.entries(svc.spec.selector))
      expect(sts.spec.template.metadata.labels[k], k).toBe(v);

    // The generated password: URL-safe (it is spliced into DATABASE_URL unescaped).
    const secret = await get<{ data: Record<string, string> }>('secret', db);
    const password = decode(secret.data.password);
    expect(password).toMatch(/^[A-Za-z0-9]{32}$/);

    // The API's DATABASE_URL names the bundled Service; the kubelet expands the password from the
    // Secret; an init container waits for the database; the chart's own Secret holds no URL.
    const api = await get<{
      spec: { template: { spec: { initContainers?: Container[]; containers: Container[] } } };
    }>('deployment', `${release}-api`);
    const env = api.spec.template.spec.containers[0]!.env ?? [];
    const names = env.map((e) => e.name);
    expect(names.indexOf('BERTH_BUNDLED_DB_PASSWORD')).toBeLessThan(names.indexOf('DATABASE_URL'));
    expect(env.find((e) => e.name === 'BERTH_BUNDLED_DB_PASSWORD')?.valueFrom?.secretKeyRef).toEqual({
      name: db,
      key: 'password',
    });
    expect(env.find((e) => e.name === 'DATABASE_URL')?.value).toBe(
      `postgresql://berth:$(BERTH_BUNDLED_DB_PASSWORD)@${db}.${ns.name}.svc:5432/berth`,
    );
    const wait = api.spec.template.spec.initContainers?.[0];
    expect(wait?.image).toBe('postgres:17.6');
    expect(wait?.command?.join(' ')).toContain(`pg_isready -q -h ${db} -p 5432 -U berth`);
    const chartSecret = await get<{ data: Record<string, string> }>('secret', release);
    expect(Object.keys(chartSecret.data).sort()).toEqual(['admin-token', 'key-hash-secret', 'wake-token']);

    // The rest of the try-out runs (kwok completes the init container): API and operator Ready.
    for (const component of ['api', 'operator']) {
      await eventually(
        async () => {
          const d = await get<{ status: { readyReplicas?: number } }>(
            'deployment',
            `${release}-${component}`,
          );
          expect(d.status.readyReplicas).toBe(1);
        },
        { description: `${component} Ready`, timeout: 60_000 },
      );
    }

    // An upgrade to a new chart version: the StatefulSet's immutable fields (selector,
    // volumeClaimTemplates) must not change with it, and the password must stay.
    const packaged = (await helmOk(['package', chartDir, '--version', '0.1.1-upgrade', '-d', work])).trim();
    const tgz = /saved it to: (\S+)$/.exec(packaged)?.[1];
    expect(tgz, packaged).toBeDefined();
    await helmOk(['upgrade', release, tgz!, '--namespace', ns.name, '--reuse-values'], {
      cluster: true,
      timeoutMs: 120_000,
    });
    const upgraded = await get<{ metadata: Meta }>('statefulset', db);
    expect(upgraded.metadata.labels?.['helm.sh/chart']).toBe('berth-0.1.1-upgrade');
    expect(upgraded.metadata.uid).toBe(sts.metadata.uid);
    expect(decode((await get<{ data: Record<string, string> }>('secret', db)).data.password)).toBe(password);
    expect((await claimOf(release)).metadata.uid).toBe(pvc.metadata.uid);

    // Uninstall: the StatefulSet, its pod, the Secret and — through the retention policy — the PVC go.
    await uninstall(release);
    await eventually(
      async () => {
        for (const [kind, name] of [
          ['statefulset', db],
          ['pod', `${db}-0`],
          ['secret', db],
          ['service', db],
          ['pvc', `data-${db}-0`],
        ] as const) {
          expect(await exists(kind, name), `${kind}/${name}`).toBe(false);
        }
      },
      { description: 'bundled database objects removed', timeout: 60_000 },
    );
  }, 300_000);

  it('onUninstall=Retain keeps the PVC and the password Secret; reinstalling the release reuses both', async () => {
    const release = 'berth-keep';
    const db = `${release}-postgresql`;
    const args = [
      '--set',
      'database.bundled.enabled=true',
      '--set',
      'database.bundled.persistence.onUninstall=Retain',
    ];
    await install(release, args);
    const sts = await get<{
      metadata: Meta;
      spec: { persistentVolumeClaimRetentionPolicy: { whenDeleted: string } };
    }>('statefulset', db);
    expect(sts.spec.persistentVolumeClaimRetentionPolicy.whenDeleted).toBe('Retain');
    const pvc = await claimOf(release);
    // Not owned by the StatefulSet: nothing garbage-collects it.
    expect(pvc.metadata.ownerReferences ?? []).toEqual([]);
    const secret = await get<{ metadata: Meta; data: Record<string, string> }>('secret', db);
    expect(secret.metadata.annotations?.['helm.sh/resource-policy']).toBe('keep');

    await uninstall(release);
    await eventually(async () => expect(await exists('statefulset', db)).toBe(false), {
      description: 'StatefulSet removed',
    });
    await eventually(async () => expect(await exists('pod', `${db}-0`)).toBe(false), {
      description: 'database pod removed',
    });
    const kept = await get<{ metadata: Meta }>('pvc', `data-${db}-0`);
    expect(kept.metadata.uid).toBe(pvc.metadata.uid);
    expect(kept.metadata.deletionTimestamp).toBeUndefined();
    const keptSecret = await get<{ data: Record<string, string> }>('secret', db);
    expect(keptSecret.data.password).toBe(secret.data.password);

    // Same release name again: Helm adopts the kept Secret, the chart reads the password back,
    // and the new StatefulSet's pod claims the same PVC.
    await install(release, args);
    expect((await get<{ data: Record<string, string> }>('secret', db)).data.password).toBe(
      secret.data.password,
    );
    expect((await claimOf(release)).metadata.uid).toBe(pvc.metadata.uid);

    await uninstall(release);
    await kubectlOk(['delete', `pvc/data-${db}-0`, `secret/${db}`, '--wait=false'], { namespace: ns.name });
  }, 300_000);
});
