import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { databaseUnavailable } from '../src/platform/db-unavailable.ts';
import { ApiError } from '../src/platform/errors.ts';
import { keyHasher } from '../src/accounts/keys/format.ts';
import { localRevocationBus, type RevocationBus } from '../src/accounts/keys/revocation-bus.ts';
import { keyService } from '../src/accounts/keys/service.ts';
import {
  keyConflict,
  type KeyRecord,
  type KeyRepository,
  type NewKey,
} from '../src/accounts/keys/repository.ts';

// A tiny in-memory repository that counts lookups: the service's only contact with the database.
function memoryRepo(clock = () => new Date()) {
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
      const row = {
        ...key,
        createdAt: clock(),
        lastUsedAt: null,
        revokedAt: null,
        replacedBy: null,
        graceExpiresAt: null,
        rotatedFrom: key.rotatedFrom ?? null,
        lineage: key.lineage ?? null,
      };
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
    async update(accountId, keyId, patch, now, check) {
      const row = rows.get(keyId);
      if (!row || row.accountId !== accountId) return null;
      const conflict = keyConflict(row, now);
      if (conflict) return { conflict, key: row };
      check?.(row);
      Object.assign(row, Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined)));
      return { key: { ...row } };
    },
    async rotate(accountId, keyId, next, grace, now) {
      const old = rows.get(keyId);
      if (!old || old.accountId !== accountId) return null;
      const conflict = old.replacedBy ? 'rotated' : keyConflict(old, now);
      if (conflict) return { conflict, key: old };
      const created = await repo.createKey(next(old));
      Object.assign(old, { replacedBy: created.id, graceExpiresAt: grace(old) });
      return { old: { ...old }, created };
    },
    async spend() {
      return new Map();
    },
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

  it('verifyNow answers at once what needs no lookup, and nothing else', async () => {
    const { mem, keys } = setup();
    const k = await keys.createKey({ accountId: 'a', name: 'k', scope: 'inference' });
    expect(keys.verifyNow('svc_live_nope')).toEqual({ ok: false, code: 'invalid_api_key' });
    expect(keys.verifyNow(k.value)).toBeUndefined(); // not cached yet: verify() reads it
    expect(mem.lookups()).toBe(0);
    await keys.verify(k.value);
    expect(keys.verifyNow(k.value)).toMatchObject({ ok: true, principal: { keyId: k.id, accountId: 'a' } });
    expect(mem.lookups()).toBe(1);
    await keys.revoke('a', k.id);
    expect(keys.verifyNow(k.value)).toBeUndefined(); // evicted: only a lookup can say (revoked)
    expect(await keys.verify(k.value)).toEqual({ ok: false, code: 'api_key_revoked' });
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
    expect(await keys.verify(k.value)).toEqual({ ok: false, code: 'api_key_revoked' });
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
    // The row it read predates the revocation, which returned before the lookup did: read again.
    expect(await pending).toEqual({ ok: false, code: 'api_key_revoked' });
    expect(await keys.verify(k.value)).toEqual({ ok: false, code: 'api_key_revoked' });
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
      onReconnected: (fn) => void events.on('reconnected', fn),
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
    const back = () => {
      down = false;
      bus.healthy = true;
      events.emit('reconnected');
    };
    return { keys, lose, back };
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

  it('a revocation bus back after a loss tells the change listeners that any key may have changed', async () => {
    const { keys, lose, back } = outage(60_000);
    const seen: (string | undefined)[] = [];
    keys.onChanged((id) => seen.push(id));
    // Not at the loss: billing would forget every key's limit, and could not read it again without
    // the database (every call refused while the leases still held it).
    lose();
    expect(seen).toEqual([]);
    back();
    expect(seen).toEqual([undefined]);
    await keys.close();
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

describe('expiry and rotation (a clock the test moves)', () => {
  function clocked() {
    let t = Date.parse('2026-03-02T10:00:00Z');
    const mem = memoryRepo(() => new Date(t));
    const keys = keyService({
      repo: mem.repo,
      hash: keyHasher(),
      bus: localRevocationBus(),
      touchIntervalMs: 60_000,
      now: () => new Date(t),
      pinnedModel: (_account, model) =>
        model === 'chat-model' ? undefined : `no catalog model named ${model}`,
    });
    return { mem, keys, at: () => t, move: (ms: number) => (t += ms) };
  }

  it('a key is refused from its expiresAt on, from the cache, with api_key_expired', async () => {
    const { mem, keys, at, move } = clocked();
    const k = await keys.createKey({
      accountId: 'a',
      name: 'k',
      scope: 'inference',
      expiresAt: new Date(at() + 60_000),
    });
    expect((await keys.verify(k.value)).ok).toBe(true);
    move(59_999);
    expect((await keys.verify(k.value)).ok).toBe(true);
    move(1);
    expect(await keys.verify(k.value)).toEqual({ ok: false, code: 'api_key_expired' });
    expect(mem.lookups()).toBe(1); // the cached copy knew when
    expect(await keys.verify(k.value)).toEqual({ ok: false, code: 'api_key_expired' }); // and from the row
    await expect(
      keys.createKey({ accountId: 'a', name: 'late', scope: 'inference', expiresAt: new Date(at() - 1) }),
    ).rejects.toMatchObject({ status: 400, param: 'expiresAt' });
    await keys.close();
  });

  it('rotation: the old key works through its grace period (even cached before), then api_key_rotated', async () => {
    const { keys, move } = clocked();
    const old = await keys.createKey({
      accountId: 'a',
      name: 'ci',
      scope: 'inference',
      spendLimit: { amount: 5_000_000n, period: 'day' },
    });
    expect((await keys.verify(old.value)).ok).toBe(true); // cached
    const r = await keys.rotate('a', old.id, { graceSeconds: 3_600 });
    expect(r).toMatchObject({
      key: { name: 'ci', scope: 'inference', rotatedFrom: old.id, lineage: old.id },
      previous: { id: old.id, graceExpiresAt: new Date(Date.parse('2026-03-02T11:00:00Z')) },
    });
    expect(r!.key.spendLimit).toEqual({ amount: 5_000_000n, period: 'day' });
    expect((await keys.verify(r!.key.value)).ok).toBe(true);
    move(3_599_999);
    expect((await keys.verify(old.value)).ok).toBe(true);
    move(1);
    expect(await keys.verify(old.value)).toEqual({ ok: false, code: 'api_key_rotated' });
    expect((await keys.verify(r!.key.value)).ok).toBe(true);
    await keys.close();
  });

  it('a key is rotated once; the grace is 0 to 30 days; revoked keys are not rotated', async () => {
    const { keys } = clocked();
    const k = await keys.createKey({ accountId: 'a', name: 'k', scope: 'inference' });
    await expect(keys.rotate('a', k.id, { graceSeconds: 30 * 86_400 + 1 })).rejects.toMatchObject({
      status: 400,
      param: 'gracePeriodSeconds',
    });
    const r = await keys.rotate('a', k.id, { graceSeconds: 0 });
    expect(await keys.verify(k.value)).toEqual({ ok: false, code: 'api_key_rotated' });
    await expect(keys.rotate('a', k.id, {})).rejects.toMatchObject({
      status: 409,
      code: 'key_conflict',
      message: `API key ${k.id} was already rotated (replaced by ${r!.key.id}); rotate that key instead`,
    });
    await keys.revoke('a', r!.key.id);
    await expect(keys.rotate('a', r!.key.id, {})).rejects.toMatchObject({
      status: 409,
      message: `API key ${r!.key.id} is revoked; create a new key instead`,
    });
    expect(await keys.rotate('a', 'key_nope', {})).toBeNull();
    await keys.close();
  });

  it('an expiring key gives its successor the same lifetime from now', async () => {
    const { keys, at, move } = clocked();
    const k = await keys.createKey({
      accountId: 'a',
      name: 'k',
      scope: 'inference',
      expiresAt: new Date(at() + 90 * 86_400_000),
    });
    move(80 * 86_400_000);
    const r = await keys.rotate('a', k.id, {});
    expect(r!.key.expiresAt).toEqual(new Date(at() + 90 * 86_400_000));
    const forever = await keys.rotate('a', r!.key.id, { expiresAt: null });
    expect(forever!.key.expiresAt).toBeNull();
    await keys.close();
  });

  it('a pinned model nothing serves is refused at write, naming the field; nothing is written', async () => {
    const { keys, mem } = clocked();
    await expect(
      keys.createKey({ accountId: 'a', name: 'k', scope: 'inference', pinnedModel: 'nope' }),
    ).rejects.toMatchObject({
      status: 400,
      param: 'pinnedModel',
      message: 'Invalid request body: pinnedModel: no catalog model named nope',
    });
    expect(await mem.repo.listForAccount('a')).toEqual([]);
    const k = await keys.createKey({
      accountId: 'a',
      name: 'k',
      scope: 'inference',
      pinnedModel: 'chat-model',
    });
    await expect(keys.update('a', k.id, { pinnedModel: 'nope' })).rejects.toMatchObject({
      param: 'pinnedModel',
    });
    expect((await mem.repo.listForAccount('a'))[0]!.pinnedModel).toBe('chat-model');
    await keys.close();
  });

  it('a change reaches every cache at once, and requests in flight go on', async () => {
    const { keys, mem } = clocked();
    const k = await keys.createKey({ accountId: 'a', name: 'k', scope: 'inference' });
    const seen: (string | undefined)[] = [];
    keys.onChanged((id) => seen.push(id));
    expect(await keys.verify(k.value)).toMatchObject({ principal: { allowDearerFallback: false } });
    const inFlight = keys.track(k.id);
    await keys.update('a', k.id, { allowDearerFallback: true });
    expect(await keys.verify(k.value)).toMatchObject({ principal: { allowDearerFallback: true } });
    expect(mem.lookups()).toBe(2);
    expect(inFlight.signal.aborted).toBe(false);
    expect(seen).toEqual([k.id]);
    await keys.close();
  });
});
