import type { Server } from 'node:http';
import type { Phase } from '@berth/crds';
import { PHASES } from '@berth/crds';
import { CoordinationV1Api, KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { pino } from 'pino';
import { startController, type WakeHintAnswer } from './core/controller.ts';
import { wakeStages } from './core/placement.ts';
import type { TerminationHook } from './core/runtime.ts';
import type { OperatorConfig } from './config.ts';
import { DEFAULT_HF_ENDPOINT } from './config.ts';
import { reuseConnections } from './k8s/connections.ts';
import type { BuildConfig } from './k8s/builders.ts';
import { LeaderElector } from './k8s/leader.ts';
import { kubeRuntime } from './k8s/runtime.ts';
import type { Metrics } from './metrics.ts';
import { createMetrics, serveMetrics } from './metrics.ts';
import { wakeRoute } from './wake-route.ts';

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

/** Composition root: main.ts and the integration tests both start the operator through here. */
/** What the workload builders take from the operator's configuration (the benches build the same). */
export function buildConfig(config: OperatorConfig): BuildConfig {
  return {
    engineImage: config.engineImage,
    startupTimeoutSeconds: config.startupTimeoutSeconds,
    drainSeconds: config.drainSeconds,
    terminationGracePeriodSeconds: config.terminationGracePeriodSeconds,
    modelCache: config.modelCache,
    ...(config.hfEndpoint !== DEFAULT_HF_ENDPOINT ? { hfEndpoint: config.hfEndpoint } : {}),
    ...(config.engineTracing ? { engineTracing: config.engineTracing } : {}),
  };
}

export async function startOperator(
  config: OperatorConfig,
  deps: OperatorDeps = {},
): Promise<OperatorHandle> {
  const log = deps.log ?? pino({ name: 'berth-operator', level: config.logLevel });
  const kc = reuseConnections(deps.kubeConfig ?? loadKubeConfig(config.kubeconfig));
  const metrics = createMetrics();
  let controller:
    | { synced: boolean; wake(name: string, requestedAt: string): WakeHintAnswer; stop(): Promise<void> }
    | undefined;
  let controllerStarting: Promise<void> = Promise.resolve();
  let stopping = false;

  const startKubeController = () => {
    const c = startController(
      {
        config,
        catalog: config.catalog,
        ...(deps.termination ? { termination: deps.termination } : {}),
        log,
        ...(deps.now ? { now: deps.now } : {}),
        ...(deps.fetch ? { fetch: deps.fetch } : {}),
        observer: {
          pass: () => metrics.reconcileDuration.startTimer(),
          outcome: (outcome) => {
            metrics.reconciles.inc({ result: outcome });
            if (outcome === 'error' || outcome === 'terminal') metrics.errors.inc({ where: 'reconcile' });
          },
          start: (t) => {
            metrics.replicaStart.observe({ stage: 'scheduled' }, t.scheduledSeconds);
            metrics.replicaStart.observe({ stage: 'image_ready' }, t.imageReadySeconds);
            metrics.replicaStart.observe({ stage: 'engine_ready' }, t.engineReadySeconds);
            metrics.replicaStart.observe({ stage: 'total' }, t.totalSeconds);
          },
          wake: (receipt) => {
            for (const [stage, seconds] of Object.entries(wakeStages(receipt)))
              metrics.wakeStage.observe({ stage }, seconds);
          },
          decision: (_ep, d) => {
            if (d.wakeDurationSeconds !== undefined) metrics.wakeDuration.observe(d.wakeDurationSeconds);
          },
        },
      },
      (enqueue) => {
        const k = kubeRuntime({
          kc,
          namespace: config.namespace,
          build: buildConfig(config),
          crashLoopRestarts: config.crashLoopRestarts,
          identity: config.identity,
          log,
          onInformerError: () => metrics.errors.inc({ where: 'informer' }),
          onWrite: (resource) => metrics.writes.inc({ resource }),
          onWatchEvent: (outcome) => metrics.watchEvents.inc({ outcome }),
          ...(config.inferencePools ? { pools: config.inferencePools } : {}),
          ...(config.poolRecheckMs ? { poolRecheckMs: config.poolRecheckMs } : {}),
          enqueue,
        });
        return {
          store: k.store,
          driver: k.driver,
          cache: k.cache,
          keys: () => k.cache.keys(),
          start: () => k.cache.start(),
          stop: () => k.cache.stop(),
          gone: async (key: string) => {
            k.driver.forget(key);
            k.store.forget(key);
          },
        };
      },
    );
    const tick = setInterval(() => {
      metrics.queueDepth.set(c.depth);
      const counts = Object.fromEntries(PHASES.map((p) => [p, 0])) as Record<Phase, number>;
      for (const ep of c.runtime.cache.listEndpoints()) if (ep.status?.phase) counts[ep.status.phase]++;
      for (const p of PHASES) metrics.endpoints.set({ phase: p }, counts[p]);
    }, 5000);
    tick.unref();
    return {
      get synced() {
        return c.synced;
      },
      wake: (name: string, requestedAt: string) => c.wake(`${config.namespace}/${name}`, requestedAt),
      async stop() {
        clearInterval(tick);
        await c.stop();
        log.info('controller stopped; queue drained');
      },
    };
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
          if (!stopping) controller = startKubeController();
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
    controller = startKubeController();
  }

  let server: Server | undefined;
  let port = 0;
  if (config.metricsPort >= 0) {
    const wake = config.wakeToken
      ? wakeRoute({
          token: config.wakeToken,
          wake: (name, requestedAt) => controller?.wake(name, requestedAt),
          onAnswer: (result) => metrics.wakeHints.inc({ result }),
        })
      : undefined;
    const served = await serveMetrics(
      metrics,
      config.metricsPort,
      () => (controller ? controller.synced : !!elector),
      wake,
    );
    server = served.server;
    port = served.port;
  }
  log.info(
    { identity, metricsPort: port, leaderElection: config.leaderElection, wakeRoute: !!config.wakeToken },
    'operator started',
  );

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
