import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { databaseUnavailable } from '../src/db-unavailable.ts';
import { ApiError } from '../src/errors.ts';
import { keyHasher } from '../src/keys/format.ts';
import { localRevocationBus, type RevocationBus } from '../src/keys/revocation-bus.ts';
import { keyService } from '../src/keys/service.ts';
import type { KeyRecord, KeyRepository, NewKey } from '../src/repositories/keys.ts';

// A tiny in-memory repository that counts lookups: the service's only contact with the database.
function memoryRepo() {
  const rows = new Map<string, KeyRecord & { hash: string }>();
  let lookups = 0;
  let gate: Promise<void> | undefined;
  const repo: KeyRepository = {
    async createAccountWithKey(account, key) {
      const k = await repo.createKey(key);
      return { account: { ...account, createdAt: new Date() }, key: k };
    },
    async accountExists() {
      return true;
    },
    async accountOfIdentity() {
      return null;
    },
    async findAccount() {
      return null;
    },
    async firstActiveKey(accountId, scopes) {
      return (
        [...rows.values()].find(
          (r) => r.accountId === accountId && !r.revokedAt && scopes.includes(r.scope),
        ) ?? null
      );
    },
    async createKey(key: NewKey) {
      const row = { ...key, createdAt: new Date(), lastUsedAt: null, revokedAt: null };
      rows.set(key.id, row);
      return row;
    },
    async createKeyWithin(key, limit) {
      const active = [...rows.values()].filter((r) => r.accountId === key.accountId && !r.revokedAt).length;
      if (active >= limit) return { created: false, active, limit };
      return { created: true, key: await repo.createKey(key) };
    },
    async findByHash(hash) {
      lookups++;
      const found = [...rows.values()].find((r) => r.hash === hash) ?? null;
      const snapshot = found ? { ...found } : null;
      await gate;
      return snapshot;
    },
    async listForAccount(accountId) {
      return [...rows.values()].filter((r) => r.accountId === accountId);
    },
    async pageForAccount(accountId, { limit, after }) {
      const all = [...rows.values()].filter((r) => r.accountId === accountId);
      const from = after ? all.findIndex((r) => r.id === after) : -1;
      if (after && from < 0) return null;
      return all.slice(from + 1, from + 1 + limit);
    },
    async revoke(accountId, keyId, at) {
      const row = rows.get(keyId);
      if (!row || row.accountId !== accountId) return null;
      const changed = !row.revokedAt;
      row.revokedAt ??= at;
      return { key: { ...row }, changed };
    },
    async touch() {},
  };
  return {
    repo,
    lookups: () => lookups,
    hold() {
      let release!: () => void;
      gate = new Promise((r) => (release = r));
      return () => {
        gate = undefined;
        release();
      };
    },
  };
}

function setup(bus: RevocationBus = localRevocationBus()) {
  const mem = memoryRepo();
  const keys = keyService({ repo: mem.repo, hash: keyHasher(), bus, touchIntervalMs: 60_000 });
  return { mem, keys, bus };
}

describe('key verification', () => {
  it('a warm key costs no lookup', async () => {
    const { mem, keys } = setup();
    const k = await keys.createKey({ accountId: 'a', name: 'k', scope: 'inference' });
    expect(await keys.verify(k.value)).toMatchObject({
      ok: true,
      principal: { keyId: k.id, accountId: 'a', scope: 'inference' },
    });
    for (let i = 0; i < 100; i++) await keys.verify(k.value);
    expect(mem.lookups()).toBe(1);
    await keys.close();
  });

  it('a malformed key costs no lookup', async () => {
    const { mem, keys } = setup();
    expect(await keys.verify('svc_live_nope')).toEqual({ ok: false, code: 'invalid_api_key' });
    expect(mem.lookups()).toBe(0);
    await keys.close();
  });

  it('revocation evicts the key at once', async () => {
    const { keys } = setup();
    const k = await keys.createKey({ accountId: 'a', name: 'k', scope: 'global' });
    await keys.verify(k.value);
    await keys.revoke('a', k.id);
    expect(await keys.verify(k.value)).toEqual({ ok: false, code: 'invalid_api_key' });
    await keys.close();
  });

  it('a revocation during a lookup keeps the stale row out of the cache', async () => {
    const { mem, keys, bus } = setup();
    const k = await keys.createKey({ accountId: 'a', name: 'k', scope: 'global' });
    const release = mem.hold();
    const pending = keys.verify(k.value); // reads the row while it is still active
    await keys.revoke('a', k.id);
    void bus;
    release();
    expect((await pending).ok).toBe(true); // it was valid when read
    expect(await keys.verify(k.value)).toEqual({ ok: false, code: 'invalid_api_key' });
    await keys.close();
  });

  it('while the revocation bus is unhealthy, nothing is served from the cache', async () => {
    const bus = { ...localRevocationBus(), healthy: true };
    const { mem, keys } = setup(bus);
    const k = await keys.createKey({ accountId: 'a', name: 'k', scope: 'global' });
    await keys.verify(k.value);
    bus.healthy = false;
    await keys.verify(k.value);
    await keys.verify(k.value);
    expect(mem.lookups()).toBe(3);
    await keys.close();
  });
});

describe('a database outage', () => {
  // A bus whose connection the test drops (as pgListener's onLost does) and a repository that fails
  // like a database that cannot be reached.
  function outage(outageGraceMs: number) {
    const events = new EventEmitter();
    const bus: RevocationBus & { healthy: boolean } = {
      healthy: true,
      publish: async (rev) => (events.emit('revoked', rev), { expected: 1, acknowledged: 1 }),
      onRevoked: (fn) => void events.on('revoked', fn),
      onReset: (fn) => void events.on('reset', fn),
      close: async () => {},
    };
    const mem = memoryRepo();
    let down = false;
    const findByHash = mem.repo.findByHash;
    mem.repo.findByHash = (hash) =>
      down
        ? Promise.reject(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))
        : findByHash(hash);
    const keys = keyService({
      repo: mem.repo,
      hash: keyHasher(),
      bus,
      touchIntervalMs: 60_000,
      outageGraceMs,
      isOutage: (err) => databaseUnavailable(err) !== undefined,
    });
    const lose = () => {
      down = true;
      bus.healthy = false;
      events.emit('reset');
    };
    return { keys, lose, back: () => (down = false) };
  }

  it('keys verified before it keep working; others still need the database', async () => {
    const { keys, lose } = outage(60_000);
    const warm = await keys.createKey({ accountId: 'a', name: 'warm', scope: 'inference' });
    const cold = await keys.createKey({ accountId: 'a', name: 'cold', scope: 'inference' });
    await keys.verify(warm.value);
    lose();
    expect(await keys.verify(warm.value)).toMatchObject({ ok: true, principal: { keyId: warm.id } });
    expect(await keys.verify(warm.value)).toMatchObject({ ok: true });
    await expect(keys.verify(cold.value)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await keys.close();
  });

  it('not past the grace, and not at all with a grace of 0', async () => {
    for (const grace of [0, 1]) {
      const { keys, lose } = outage(grace);
      const warm = await keys.createKey({ accountId: 'a', name: 'warm', scope: 'inference' });
      await keys.verify(warm.value);
      lose();
      await new Promise((r) => setTimeout(r, 5));
      await expect(keys.verify(warm.value)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
      await keys.close();
    }
  });

  it('a key revoked on this replica just before the outage stays refused', async () => {
    const { keys, lose } = outage(60_000);
    const k = await keys.createKey({ accountId: 'a', name: 'k', scope: 'global' });
    await keys.verify(k.value);
    await keys.revoke('a', k.id);
    lose();
    await expect(keys.verify(k.value)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await keys.close();
  });
});

describe('requests in flight', () => {
  it('are aborted with 401 Invalid API key when their key is revoked, here or on another replica', async () => {
    const bus = localRevocationBus();
    const { keys } = setup(bus);
    const k = await keys.createKey({ accountId: 'a', name: 'k', scope: 'inference' });
    const other = await keys.createKey({ accountId: 'a', name: 'other', scope: 'inference' });
    const first = keys.track(k.id);
    const second = keys.track(k.id);
    const unrelated = keys.track(other.id);
    await keys.revoke('a', k.id);
    for (const t of [first, second]) {
      expect(t.signal.aborted).toBe(true);
      expect(t.signal.reason).toBeInstanceOf(ApiError);
      expect((t.signal.reason as ApiError).message).toBe('Invalid API key');
    }
    expect(unrelated.signal.aborted).toBe(false);

    // A notice from another replica (the bus) aborts too.
    const remote = keys.track(other.id);
    await bus.publish({ keyId: other.id, hash: 'irrelevant' });
    expect(remote.signal.aborted).toBe(true);
    await keys.close();
  });

  it('tell a linked target of the revocation without making a signal; one linked late hears at once', async () => {
    const { keys } = setup();
    const k = await keys.createKey({ accountId: 'a', name: 'k', scope: 'inference' });
    const told: unknown[] = [];
    const target = { revoke: (reason: unknown) => told.push(reason) };
    const linked = keys.track(k.id);
    linked.link(target);
    const unlinked = keys.track(k.id);
    unlinked.link(target);
    unlinked.link(undefined);
    await keys.revoke('a', k.id);
    expect(told).toHaveLength(1);
    expect((told[0] as ApiError).message).toBe('Invalid API key');
    // the signal, read only now, is already aborted with the same reason
    expect(linked.signal.aborted).toBe(true);
    expect(linked.signal.reason).toBe(told[0]);
    linked.link(target);
    expect(told).toHaveLength(2);
    await keys.close();
  });

  it('released requests are forgotten', async () => {
    const { keys } = setup();
    const k = await keys.createKey({ accountId: 'a', name: 'k', scope: 'inference' });
    const t = keys.track(k.id);
    t.release();
    await keys.revoke('a', k.id);
    expect(t.signal.aborted).toBe(false);
    await keys.close();
  });
});
