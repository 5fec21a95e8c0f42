// A pre-warm pass (./prewarm.ts says why and which endpoints): the runs whose next fire's pre-warm
// is due (chronos_runs.prewarm_at, set with each fire, due at the fire minus CHRONOS_PREWARM_SECONDS)
// are taken in batches, each leased for PREWARM_LEASE_MS (a replica that dies meanwhile leaves it to
// be retried then), and their hibernated endpoints woken through the proxy's own wake-on-demand path.
// The endpoints the fire would call that are awake get activity reported (a call's annotation), and
// one whose idle timeout is shorter than the time left is looked at again every half idle timeout
// until the fire: the lead is what CHRONOS_PREWARM_SECONDS says, whatever the idle timeout.
import { ANNOTATION_LAST_ACTIVITY } from '@berth/crds';
import type { Logger } from 'pino';
import type { Counter } from 'prom-client';
import type { ChronosClock } from './clock.ts';
import type { StepDeps } from './execute.ts';
import { earlier } from './fire.ts';
import { prewarmTargets, type PrewarmPlatform } from './prewarm.ts';
import type { ChronosQueueRepository, PrewarmClaim } from './queue-repository.ts';

const PREWARM_BATCH = 100;
/** A pre-warm taken by a replica that died (or whose wake failed) is taken again this much later. */
export const PREWARM_LEASE_MS = 15_000;

export function prewarmHandler(ctx: {
  repo: Pick<ChronosQueueRepository, 'claimPrewarms' | 'releasePrewarms'>;
  steps: Pick<StepDeps, 'catalog' | 'olympus' | 'tools' | 'routes' | 'caller'>;
  /** Absent without a runtime: nothing to pre-warm. */
  platform?: PrewarmPlatform;
  enabled: boolean;
  wakes: Pick<Counter, 'inc'>;
  clock: ChronosClock;
  logger: Logger;
  /** Ends the endpoints' choice on shutdown. */
  stop: AbortSignal;
}): () => Promise<{ nextPrewarm: Date | null }> {
  const { repo, clock, logger } = ctx;

  /**
   * Wakes what the run's next fire would call and reports activity on what is awake (`touched`: the
   * endpoints already reported in this pass); returns when to come back (null: done).
   */
  const prewarm = async (run: PrewarmClaim, now: number, touched: Set<string>): Promise<Date | null> => {
    const platform = ctx.platform;
    const at = run.nextFireAt;
    // Turned off, or the fire is due already (it calls the endpoints itself): nothing to do.
    if (!platform || !ctx.enabled || !at || at.getTime() <= now) return null;
    const due = at.getTime();
    const targets = await prewarmTargets(
      { ...ctx.steps, platform },
      run.accountId,
      run.steps,
      { requestId: `chronos-prewarm-${run.id}`, signal: ctx.stop },
      { awake: true },
    );
    let again: Date | null = null;
    for (const { endpoint, model, step, asleep } of targets) {
      const id = endpoint.metadata.name;
      if (asleep) {
        await platform.upstream.wake(endpoint);
        ctx.wakes.inc();
        logger.info(
          {
            run: run.id,
            at: at.toISOString(),
            endpoint: id,
            model,
            step,
            leadSeconds: Math.round((due - now) / 1000),
          },
          'chronos pre-warm: woke a hibernated endpoint ahead of the fire',
        );
      } else if (!touched.has(id)) {
        // Activity, as a call would report it: it does not hibernate before the fire.
        touched.add(id);
        await platform.endpoints.annotate(id, { [ANNOTATION_LAST_ACTIVITY]: new Date().toISOString() });
      }
      // The activity reported now keeps it up until now + its idle timeout: while that is not well
      // past the fire, the pre-warm comes back every half idle timeout, until it is.
      const idleMs = (endpoint.spec.scaling?.idleTimeoutSeconds ?? 0) * 1000;
      if (idleMs > 0 && due - now > idleMs / 2) again = earlier(again, new Date(now + idleMs / 2));
    }
    return again;
  };

  return async () => {
    let nextPrewarm: Date | null = null;
    for (;;) {
      const now = clock.now();
      const lease = new Date(now.getTime() + PREWARM_LEASE_MS);
      const { claimed, next } = await repo.claimPrewarms(now, PREWARM_BATCH, lease);
      nextPrewarm = earlier(nextPrewarm, next);
      const done: { id: string; fire: Date; next: Date | null }[] = [];
      const touched = new Set<string>();
      await Promise.all(
        claimed.map(async (run) => {
          try {
            const again = await prewarm(run, now.getTime(), touched);
            if (run.nextFireAt) done.push({ id: run.id, fire: run.nextFireAt, next: again });
            nextPrewarm = earlier(nextPrewarm, again);
          } catch (err) {
            // Left leased: taken again when the lease is up (if the fire is still ahead).
            logger.error({ err, run: run.id }, 'chronos pre-warm failed; retried shortly');
            nextPrewarm = earlier(nextPrewarm, lease);
          }
        }),
      );
      await repo.releasePrewarms(lease, done);
      if (claimed.length < PREWARM_BATCH) return { nextPrewarm };
    }
  };
}
