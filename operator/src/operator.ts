import type { Server } from 'node:http';
import type { Phase } from '@berth/crds';
import { PHASES } from '@berth/crds';
import { CoordinationV1Api, KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { pino } from 'pino';
import { WorkQueue } from './core/queue.ts';
import { reconcileKey } from './core/reconcile.ts';
import type { TerminationHook } from './core/runtime.ts';
import type { OperatorConfig } from './config.ts';
import { LeaderElector } from './k8s/leader.ts';
import { apiErrorText } from './k8s/api-error.ts';
import { kubeRuntime } from './k8s/runtime.ts';
import type { Metrics } from './metrics.ts';
import { createMetrics, serveMetrics } from './metrics.ts';

export interface OperatorDeps {
  kubeConfig?: KubeConfig;
  log?: Logger;
  fetch?: typeof fetch;
  now?: () => Date;
  termination?: TerminationHook;
}

export interface OperatorHandle {
  readonly identity: string;
  readonly metricsPort: number;
  readonly metrics: Metrics;
  isLeader(): boolean;
  /** Stop informers, drain the queue, release the lease, close the metrics port. */
  stop(): Promise<void>;
}

interface Controller {
  stop(): Promise<void>;
  synced: boolean;
}

/** Composition root: main.ts and the integration tests both start the operator through here. */
export async function startOperator(
  config: OperatorConfig,
  deps: OperatorDeps = {},
): Promise<OperatorHandle> {
  const log = deps.log ?? pino({ name: 'berth-operator', level: config.logLevel });
  const kc = deps.kubeConfig ?? loadKubeConfig(config.kubeconfig);
  const metrics = createMetrics();
  let controller: Controller | undefined;
  let controllerStarting: Promise<void> = Promise.resolve();
  let stopping = false;

  // Billing lives in the API's database; until it hooks in, termination is recorded as an Event.
  const termination: TerminationHook = deps.termination ?? {
    onTerminate: async () => {},
  };

  const startController = (): Controller => {
    const c: Controller = { synced: false, stop: async () => {} };
    const queue = new WorkQueue(
      async (key) => {
        const end = metrics.reconcileDuration.startTimer();
        try {
          return await reconcileKey(key, {
            store: runtime.store,
            driver: runtime.driver,
            termination: {
              onTerminate: async (ep) => {
                await termination.onTerminate(ep);
                await runtime.store.recordEvent(ep, {
                  type: 'Normal',
                  reason: 'Terminated',
                  message: 'Endpoint terminated; billing record closed',
                });
              },
            },
            catalog: config.catalog,
            phase: {
              deadlines: {
                provisioningSeconds: config.provisioningTimeoutSeconds,
                wakeSeconds: config.wakeTimeoutSeconds,
              },
              scaling: { targetInFlightPerReplica: config.targetInFlightPerReplica },
            },
            preflight: {
              hfEndpoint: config.hfEndpoint,
              gpuMemoryUtilization: config.gpuMemoryUtilization,
              timeoutMs: 10_000,
              ...(deps.fetch ? { fetch: deps.fetch } : {}),
            },
            log,
            ...(deps.now ? { now: deps.now } : {}),
            onDecision: (_ep, d) => {
              if (d.wakeDurationSeconds !== undefined) metrics.wakeDuration.observe(d.wakeDurationSeconds);
            },
          });
        } finally {
          end();
        }
      },
      {
        concurrency: config.concurrency,
        onOutcome: (key, outcome, err) => {
          metrics.reconciles.inc({ result: outcome });
          if (outcome === 'error' || outcome === 'terminal') {
            metrics.errors.inc({ where: 'reconcile' });
            log.warn({ endpoint: key, outcome, err: errorText(err) }, 'reconcile failed');
          }
        },
      },
    );
    const runtime = kubeRuntime({
      kc,
      namespace: config.namespace,
      build: {
        engineImage: config.engineImage,
        startupTimeoutSeconds: config.startupTimeoutSeconds,
        drainSeconds: config.drainSeconds,
        terminationGracePeriodSeconds: config.terminationGracePeriodSeconds,
        modelCache: config.modelCache,
        ...(config.hfEndpoint !== 'https://huggingface.co' ? { hfEndpoint: config.hfEndpoint } : {}),
      },
      crashLoopRestarts: config.crashLoopRestarts,
      identity: config.identity,
      log,
      onInformerError: () => metrics.errors.inc({ where: 'informer' }),
      enqueue: (key) => queue.add(key),
    });
    const tick = setInterval(() => {
      metrics.queueDepth.set(queue.depth);
      const counts = Object.fromEntries(PHASES.map((p) => [p, 0])) as Record<Phase, number>;
      for (const ep of runtime.cache.listEndpoints()) if (ep.status?.phase) counts[ep.status.phase]++;
      for (const p of PHASES) metrics.endpoints.set({ phase: p }, counts[p]);
    }, 5000);
    tick.unref();
    const resync = setInterval(
      () => runtime.cache.keys().forEach((k) => queue.add(k)),
      config.resyncSeconds * 1000,
    );
    resync.unref();
    let halted = false;
    const started = runtime.cache.start().then(() => {
      if (halted) return;
      c.synced = true;
      log.info(
        { namespace: config.namespace || '(all)', endpoints: runtime.cache.keys().length },
        'caches synced; reconciling',
      );
      for (const k of runtime.cache.keys()) queue.add(k);
    });
    c.stop = async () => {
      halted = true;
      clearInterval(tick);
      clearInterval(resync);
      await runtime.cache.stop();
      await queue.shutdown();
      await started.catch(() => {});
      log.info('controller stopped; queue drained');
    };
    return c;
  };

  const identity = config.identity;
  let elector: LeaderElector | undefined;
  if (config.leaderElection) {
    const lease = config.lease ?? { durationSeconds: 15, renewDeadlineSeconds: 10, retryPeriodSeconds: 2 };
    elector = new LeaderElector({
      api: kc.makeApiClient(CoordinationV1Api),
      namespace: config.leaseNamespace,
      name: config.leaseName,
      identity,
      leaseDurationSeconds: lease.durationSeconds,
      renewDeadlineSeconds: lease.renewDeadlineSeconds,
      retryPeriodSeconds: lease.retryPeriodSeconds,
      log,
      onStartedLeading: () => {
        metrics.leader.set(1);
        controllerStarting = controllerStarting.then(() => {
          if (!stopping) controller = startController();
        });
      },
      onStoppedLeading: async () => {
        metrics.leader.set(0);
        await controllerStarting;
        await controller?.stop();
        controller = undefined;
      },
    });
    elector.start();
  } else {
    metrics.leader.set(1);
    controller = startController();
  }

  let server: Server | undefined;
  let port = 0;
  if (config.metricsPort >= 0) {
    const served = await serveMetrics(metrics, config.metricsPort, () =>
      controller ? controller.synced : !!elector,
    );
    server = served.server;
    port = served.port;
  }
  log.info({ identity, metricsPort: port, leaderElection: config.leaderElection }, 'operator started');

  return {
    identity,
    metricsPort: port,
    metrics,
    isLeader: () => (elector ? elector.isLeader : true),
    stop: async () => {
      stopping = true;
      if (elector) await elector.stop();
      await controllerStarting;
      await controller?.stop();
      controller = undefined;
      await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
      log.info({ identity }, 'operator stopped');
    },
  };
}

function loadKubeConfig(path: string | undefined): KubeConfig {
  const kc = new KubeConfig();
  if (path) kc.loadFromFile(path);
  else kc.loadFromDefault();
  return kc;
}

function errorText(err: unknown): string | undefined {
  return err ? apiErrorText(err) : undefined;
}
