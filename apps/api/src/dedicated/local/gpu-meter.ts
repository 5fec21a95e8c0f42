// Dedicated GPU time in local mode, metered as on Kubernetes: the process driver tells how many
// processes of an endpoint run whenever one starts or exits (a process holds its GPUs from its start
// until it has exited, draining included), the reconciler's termination hook closes the record
// before the endpoint's row goes, and every `syncIntervalMs` each endpoint is observed again (the
// heartbeat that bounds what a crash of the API can cost: nothing runs after a restart, so what ran
// before it is closed at the last observation).
import type { DedicatedEndpoint } from '@berth/crds';
import type { TerminationHook } from '@berth/operator';
import type { Logger } from 'pino';
import type { GpuBilling } from '../../billing/metering.ts';

export interface LocalGpuMeter {
  /** Before the runtime starts: meters left open by a previous run are closed where it last looked. */
  recover(): Promise<void>;
  /** After it started: endpoints gone meanwhile are closed, and the heartbeat begins. */
  start(list: () => DedicatedEndpoint[], get: (id: string) => DedicatedEndpoint | undefined): Promise<void>;
  onRunning(id: string, running: number): void;
  termination: TerminationHook;
  close(): Promise<void>;
}

export function localGpuMeter(o: {
  gpu: GpuBilling;
  now: () => Date;
  logger: Logger;
  syncIntervalMs: number;
}): LocalGpuMeter {
  const log = o.logger.child({ component: 'gpu-meter' });
  const running = new Map<string, number>();
  /** One write at a time per endpoint, in the order the changes happened. */
  const chains = new Map<string, Promise<void>>();
  let get: (id: string) => DedicatedEndpoint | undefined = () => undefined;
  let timer: NodeJS.Timeout | undefined;

  const enqueue = (id: string, write: () => Promise<void>) => {
    const next = (chains.get(id) ?? Promise.resolve()).then(write).catch((err: unknown) => {
      log.warn({ err, endpoint: id }, 'GPU meter write failed; the next change or heartbeat writes it again');
    });
    chains.set(id, next);
    void next.then(() => chains.get(id) === next && chains.delete(id));
    return next;
  };
  const observe = (id: string) =>
    enqueue(id, async () => {
      const ep = get(id);
      if (!ep) return;
      await o.gpu.observe({
        endpointId: id,
        accountId: ep.spec.account,
        instanceType: ep.spec.hardware.gpuType,
        gpusPerReplica: ep.spec.hardware.gpuCount,
        replicas: running.get(id) ?? 0,
        at: o.now(),
      });
    });

  return {
    async recover() {
      for (const id of await o.gpu.unterminated()) {
        const m = await o.gpu.meter(id);
        if (!m || m.replicas === 0) continue;
        await o.gpu.observe({
          endpointId: id,
          accountId: m.accountId,
          instanceType: m.instanceType,
          gpusPerReplica: m.gpusPerReplica,
          replicas: 0,
          at: o.now(),
          since: 'lastObserved',
        });
        log.info(
          { endpoint: id },
          'GPU time of processes that ran before the restart closed at the last observation',
        );
      }
    },
    async start(list, lookup) {
      get = lookup;
      for (const id of await o.gpu.unterminated()) {
        if (lookup(id)) continue;
        const m = await o.gpu.meter(id);
        if (m) await o.gpu.terminate(id, m.lastObservedAt);
      }
      timer = setInterval(() => {
        for (const ep of list()) void observe(ep.metadata.name);
      }, o.syncIntervalMs);
      timer.unref();
    },
    onRunning(id, n) {
      running.set(id, n);
      void observe(id);
    },
    termination: {
      // Called after the runtime stopped the endpoint's processes: what they ran is written first.
      onTerminate: async (ep) => {
        const id = ep.metadata.name;
        // Not through enqueue: a failure must reach the reconciler, which keeps the row and retries.
        const closed = (chains.get(id) ?? Promise.resolve()).then(() => o.gpu.terminate(id, o.now()));
        chains.set(
          id,
          closed.catch(() => {}),
        );
        await closed;
        running.delete(id);
      },
    },
    /** After the runtime stopped every process (they drained): what ran ends now. */
    async close() {
      clearInterval(timer);
      for (const [id, n] of running)
        if (n > 0) {
          running.set(id, 0);
          void observe(id);
        }
      await Promise.all([...chains.values()]);
    },
  };
}
