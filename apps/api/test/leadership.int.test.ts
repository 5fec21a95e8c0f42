// The GPU meter's leadership on real PostgreSQL: of two replicas exactly one leads; when the leader's
// session dies (its backend terminated, as when the process is killed) the other takes over, and the
// old one stops its work; a leader that closes hands over at once.
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GPU_METER_LOCK, pgLeadership, type Leadership } from '../src/billing/leadership.ts';
import { createTestDatabase, sql, type TestDatabase } from '@berth/test/support/postgres';
import { eventually } from '@berth/test/support/eventually';

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase('leadership');
});
afterAll(async () => {
  await tdb?.drop();
});

function replica(name: string, working: Set<string>): Leadership {
  return pgLeadership({
    url: tdb.url,
    lock: GPU_METER_LOCK,
    name: `test-${name}`,
    retryMs: 100,
    logger: pino({ level: 'silent' }),
    work: async () => {
      working.add(name);
      return async () => {
        working.delete(name);
      };
    },
  });
}

describe('pgLeadership', () => {
  it('one of two replicas leads; the other takes over when its session dies or it closes', async () => {
    const working = new Set<string>();
    const a = replica('a', working);
    await eventually(() => a.leading, { timeout: 5_000 });
    const b = replica('b', working);
    const c = replica('c', working);
    // Several rounds of retries: still only one.
    await new Promise((r) => setTimeout(r, 500));
    expect([a.leading, b.leading, c.leading]).toEqual([true, false, false]);
    expect([...working]).toEqual(['a']);

    // The leader's session dies (what a SIGKILL of its process does to it).
    await sql(
      tdb.url,
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'berth-test-a'`,
    );
    const next = await eventually(
      () => {
        const leaders = [b, c].filter((l) => l.leading);
        return leaders.length === 1 && !a.leading ? leaders[0]! : false;
      },
      { timeout: 5_000 },
    );
    expect(working.has('a')).toBe(false);
    expect(working.size).toBe(1);

    // Closing hands over to the remaining one; the old leader, reconnected, waits its turn.
    const last = next === b ? c : b;
    await next.close();
    await eventually(() => last.leading || a.leading, { timeout: 5_000 });
    expect([a, last].filter((l) => l.leading)).toHaveLength(1);
    expect(working.size).toBe(1);
    await a.close();
    await last.close();
    expect(working.size).toBe(0);
  });
});
