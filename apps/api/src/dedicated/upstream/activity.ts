// Tells the operator an endpoint has traffic, through annotations on the resource itself, so it
// works with any number of API replicas: the time of the last activity and the requests this
// replica has in flight. Refreshed every ACTIVITY_REFRESH_SECONDS / 2 while anything is in flight,
// so an endpoint with a request in flight (or held) never looks idle. An endpoint whose write answers
// not-found was deleted (a stream may still be draining from it): it is dropped, not retried, until a
// call for it begins again.
import { ACTIVITY_REFRESH_SECONDS, ANNOTATION_IN_FLIGHT, ANNOTATION_LAST_ACTIVITY } from '@berth/crds';
import type { Logger } from 'pino';
import type { EndpointWrites } from '../ports.ts';

export interface Activity {
  /**
   * A request for the endpoint began; call the returned function when it ends. `reportNow: false`
   * leaves the report to the next interval even after a quiet spell (a call that wakes the endpoint:
   * its wake annotation says there is traffic, in the same write).
   */
  begin(id: string, reportNow?: boolean): () => void;
  inFlight(id: string): number;
  close(): Promise<void>;
}

export function activityReporter(
  store: Pick<EndpointWrites, 'annotate'>,
  logger: Logger,
  intervalMs = (ACTIVITY_REFRESH_SECONDS * 1000) / 2,
): Activity {
  const inflight = new Map<string, number>();
  const dirty = new Set<string>();
  const lastReport = new Map<string, number>();
  const reporting = new Set<string>();
  /** Endpoints that answered not-found: not reported until a call for them begins again. */
  const gone = new Set<string>();

  const report = async (id: string) => {
    if (reporting.has(id)) return;
    reporting.add(id);
    dirty.delete(id);
    lastReport.set(id, Date.now());
    try {
      await store.annotate(id, {
        [ANNOTATION_LAST_ACTIVITY]: new Date().toISOString(),
        [ANNOTATION_IN_FLIGHT]: String(inflight.get(id) ?? 0),
      });
    } catch (err) {
      if ((err as { code?: unknown }).code === 404) {
        gone.add(id);
        lastReport.delete(id);
        return;
      }
      dirty.add(id);
      logger.warn({ endpoint: id, err: (err as Error).message }, 'could not report endpoint activity');
    } finally {
      reporting.delete(id);
    }
  };

  const timer = setInterval(() => {
    for (const id of new Set([...dirty, ...inflight.keys()])) if (!gone.has(id)) void report(id);
    for (const id of gone) {
      if (inflight.has(id)) continue;
      gone.delete(id);
      dirty.delete(id);
    }
    for (const [id, at] of lastReport)
      if (Date.now() - at > 10 * intervalMs && !inflight.has(id)) lastReport.delete(id);
  }, intervalMs);
  timer.unref();

  return {
    begin(id, reportNow = true) {
      gone.delete(id);
      inflight.set(id, (inflight.get(id) ?? 0) + 1);
      dirty.add(id);
      // The first request after a quiet spell is reported at once: the endpoint may be close to
      // its idle timeout.
      if (reportNow && Date.now() - (lastReport.get(id) ?? 0) > intervalMs) void report(id);
      let ended = false;
      return () => {
        if (ended) return;
        ended = true;
        const n = (inflight.get(id) ?? 1) - 1;
        if (n <= 0) inflight.delete(id);
        else inflight.set(id, n);
        dirty.add(id);
      };
    },
    inFlight: (id) => inflight.get(id) ?? 0,
    async close() {
      clearInterval(timer);
      await Promise.all([...dirty].filter((id) => !gone.has(id)).map((id) => report(id)));
    },
  };
}
