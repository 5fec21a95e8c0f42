// The activity reporter: what the operator scales and hibernates on. An endpoint deleted while a
// call to it is in flight answers the reporter's writes with not-found; that drops it, once, instead
// of a warning every interval until the API restarts (issue 36: 56 warnings for one endpoint).
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { ANNOTATION_IN_FLIGHT } from '@berth/crds';
import { activityReporter } from '../src/dedicated/upstream/activity.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A logger whose warnings the test reads. */
function recordingLogger() {
  const warnings: string[] = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(line) });
  return { logger, warnings };
}

describe('activityReporter', () => {
  it('drops an endpoint whose write answers not-found: no retries while its call stays in flight', async () => {
    const { logger, warnings } = recordingLogger();
    const writes: string[] = [];
    const store = {
      annotate: async (id: string) => {
        writes.push(id);
        throw Object.assign(new Error(`endpoint ${id} not found`), { code: 404 });
      },
    };
    const activity = activityReporter(store, logger, 20);
    const end = activity.begin('endpt-gone');
    await sleep(200); // ten intervals with the call in flight
    expect(writes).toEqual(['endpt-gone']);
    expect(warnings).toHaveLength(0);
    end();
    await sleep(60);
    await activity.close();
    expect(writes).toEqual(['endpt-gone']);
  });

  it('keeps retrying a write that failed for another reason, and reports the count in flight', async () => {
    const { logger, warnings } = recordingLogger();
    const writes: Record<string, string>[] = [];
    let fail = 2;
    const store = {
      annotate: async (_id: string, a: Record<string, string>) => {
        writes.push(a);
        if (fail-- > 0) throw Object.assign(new Error('connection reset'), { code: 'ECONNRESET' });
      },
    };
    const activity = activityReporter(store, logger, 20);
    const end = activity.begin('endpt-a');
    await sleep(120);
    expect(writes.length).toBeGreaterThanOrEqual(3);
    expect(warnings).toHaveLength(2);
    expect(writes.at(-1)![ANNOTATION_IN_FLIGHT]).toBe('1');
    end();
    await activity.close();
    expect(writes.at(-1)![ANNOTATION_IN_FLIGHT]).toBe('0');
  });

  it('reports an endpoint again when a call for it begins after a not-found (an id created anew)', async () => {
    const { logger } = recordingLogger();
    const writes: string[] = [];
    let gone = true;
    const store = {
      annotate: async (id: string) => {
        writes.push(id);
        if (gone) throw Object.assign(new Error('not found'), { code: 404 });
      },
    };
    const activity = activityReporter(store, logger, 20);
    activity.begin('endpt-b')();
    await sleep(60);
    expect(writes).toEqual(['endpt-b']);
    gone = false;
    await sleep(30); // past the quiet spell: the next call is reported at once
    const end = activity.begin('endpt-b');
    await sleep(10);
    expect(writes.length).toBeGreaterThanOrEqual(2);
    end();
    await activity.close();
  });
});
