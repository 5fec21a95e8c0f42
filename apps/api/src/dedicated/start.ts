// Dedicated endpoints, started: the runtime they run on (Kubernetes or local processes), the proxy's
// usage recorder and Public rate limits, the per-endpoint metrics, the upstream (wake, hold, replica
// choice) and, on Kubernetes, the GPU meter on one API replica. Each part pushes its closer.
import path from 'node:path';
import type { Catalog } from '@berth/crds';
import type { Database } from '@berth/db';
import type { Closers } from '../platform/closers.ts';
import type { Config } from '../platform/config.ts';
import type { Logger } from '../platform/logger.ts';
import type { ApiMetrics } from '../platform/metrics.ts';
import { GPU_METER_LOCK, pgLeadership, soleLeadership } from '../billing/leadership.ts';
import type { GpuBilling } from '../billing/metering.ts';
import { gpuMeterMetrics } from '../billing/metrics.ts';
import { localEndpointRepository } from './local/repository.ts';
import { endpointMetrics, wakeStageMetrics, type EndpointMetrics } from './metrics.ts';
import type { EndpointRuntime } from './ports.ts';
import { memoryRateLimiter, redisRateLimiter, type RateLimiter } from './proxy/ratelimit.ts';
import { importSpooledUsage, usageRecorder, type UsageRecorder } from './proxy/usage.ts';
import { usageRepository } from './proxy/usage-repository.ts';
import { kubernetesGpuMeter, kubernetesRuntime, localRuntime } from './runtimes.ts';
import { platformUpstream, type PlatformUpstream } from './upstream/endpoint-upstream.ts';

export interface Dedicated {
  runtime: EndpointRuntime;
  upstream: PlatformUpstream;
  usage: UsageRecorder;
  limiter: RateLimiter;
  metrics: EndpointMetrics;
}

export async function startDedicated(deps: {
  config: Config;
  kind: 'kubernetes' | 'local';
  db: Database;
  catalog: Catalog;
  gpu: GpuBilling;
  metrics: ApiMetrics;
  logger: Logger;
  now: () => Date;
  closers: Closers;
}): Promise<Dedicated> {
  const { config, kind, db, logger, metrics, closers } = deps;
  const runtime =
    kind === 'kubernetes'
      ? kubernetesRuntime(config, logger)
      : await localRuntime({
          config,
          logger,
          repository: localEndpointRepository(db.prisma),
          catalog: deps.catalog,
          gpu: deps.gpu,
          now: deps.now,
          onWake: wakeStageMetrics(metrics.registry),
        });
  closers.push(() => runtime.close());
  const spoolDir = path.join(config.BERTH_DATA_DIR, 'usage-spool');
  await importSpooledUsage(usageRepository(db.prisma), spoolDir, logger);
  const usage = usageRecorder(usageRepository(db.prisma), logger, config.USAGE_FLUSH_INTERVAL_MS, {
    spoolDir,
  });
  closers.push(() => usage.close());
  const limiter = config.REDIS_URL ? await redisRateLimiter(config.REDIS_URL, logger) : memoryRateLimiter();
  closers.push(() => limiter.close());
  await runtime.ready();
  const epMetrics = endpointMetrics(metrics.registry, runtime.endpoints);
  const upstream = platformUpstream({
    endpoints: runtime.endpoints,
    backends: runtime.backends,
    logger,
    onWoken: epMetrics.woken,
    onFirstByte: epMetrics.firstByte,
    wakeRetryAfterSeconds: config.WAKE_RETRY_AFTER_SECONDS,
    // Local mode: this one API process starts every engine and sends it every call, so the
    // engines' own counts are its own: nothing to sample.
    engineLoadIntervalMs: kind === 'local' ? 0 : config.ENGINE_LOAD_SAMPLE_MS,
    onEngineSample: (outcome) => metrics.engineLoadSamples.inc({ outcome }),
  });
  closers.push(() => upstream.close());
  if (kind === 'kubernetes') {
    logger.info({ namespace: config.BERTH_NAMESPACE }, 'watching dedicated endpoints');
    const meterMetrics = gpuMeterMetrics(metrics.registry);
    const work = kubernetesGpuMeter(config, {
      gpu: deps.gpu,
      logger,
      now: deps.now,
      onSync: meterMetrics.sync,
    });
    // Exactly one API replica meters GPU time; on the embedded database there is only one.
    const gpuMeter = config.DATABASE_URL
      ? pgLeadership({
          url: config.DATABASE_URL,
          lock: GPU_METER_LOCK,
          name: 'gpu-meter',
          work,
          logger,
          onChange: meterMetrics.leading,
        })
      : soleLeadership(work, logger);
    closers.push(() => gpuMeter.close());
  }
  return { runtime, upstream, usage, limiter, metrics: epMetrics };
}
