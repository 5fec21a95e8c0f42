import type { KubernetesObject } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { isOlder, OwnWrites } from '../src/k8s/own-writes.ts';

const obj = (rv: string, note = ''): KubernetesObject & { note: string } => ({
  metadata: { name: 'e', namespace: 'ns', resourceVersion: rv },
  note,
});

/** A write whose answer the test releases (to deliver watch events while it is in flight). */
function pending<T>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe('OwnWrites: a pass reads what the previous one wrote', () => {
  it('serves the answer of a write until the watch delivers it, then the informer again', async () => {
    const own = new OwnWrites<KubernetesObject>();
    const informed = obj('10', 'before');
    await own.write('ns/e', async () => obj('12', 'ours'));
    expect(own.get('ns/e', informed)).toMatchObject({ note: 'ours' });

    // Someone else's older change arrives first: ours still wins, and it is not an echo.
    expect(own.delivered('ns/e', obj('11', 'theirs'))).toBe(false);
    expect(own.get('ns/e', obj('11'))).toMatchObject({ note: 'ours' });

    // Our write comes back: an echo (nothing to reconcile), and the informer is current again.
    expect(own.delivered('ns/e', obj('12', 'ours'))).toBe(true);
    expect(own.size).toBe(0);
    expect(own.get('ns/e', obj('12', 'informer'))).toMatchObject({ note: 'informer' });
  });

  it('a newer change by someone else supersedes our write (not an echo)', async () => {
    const own = new OwnWrites<KubernetesObject>();
    await own.write('ns/e', async () => obj('12', 'ours'));
    expect(own.delivered('ns/e', obj('15', 'theirs'))).toBe(false);
    expect(own.get('ns/e', obj('15', 'theirs'))).toMatchObject({ note: 'theirs' });
  });

  it('keeps nothing when the watch delivered the write, or a newer one, before its answer', async () => {
    const own = new OwnWrites<KubernetesObject>();
    const a = pending<KubernetesObject>();
    const w = own.write('ns/e', () => a.promise);
    own.delivered('ns/e', obj('12'));
    a.resolve(obj('12', 'ours'));
    await w;
    expect(own.size).toBe(0);

    const b = pending<KubernetesObject>();
    const w2 = own.write('ns/e', () => b.promise);
    own.delivered('ns/e', obj('20', 'theirs'));
    b.resolve(obj('19', 'ours'));
    await w2;
    expect(own.get('ns/e', obj('20', 'theirs'))).toMatchObject({ note: 'theirs' });
  });

  it('never serves an object deleted while the write was in flight, nor after its deletion', async () => {
    const own = new OwnWrites<KubernetesObject>();
    const a = pending<KubernetesObject>();
    const w = own.write('ns/e', () => a.promise);
    own.deleted('ns/e');
    a.resolve(obj('12', 'ours'));
    await w;
    expect(own.get('ns/e', undefined)).toBeUndefined();

    await own.write('ns/e', async () => obj('13', 'ours'));
    own.deleted('ns/e');
    expect(own.get('ns/e', undefined)).toBeUndefined();
  });

  it('a failed write keeps nothing and lets the error through', async () => {
    const own = new OwnWrites<KubernetesObject>();
    await expect(
      own.write('ns/e', async () => {
        throw new Error('409 conflict');
      }),
    ).rejects.toThrow('409 conflict');
    expect(own.size).toBe(0);
    expect(own.get('ns/e', obj('1', 'informer'))).toMatchObject({ note: 'informer' });
  });

  it('orders resource versions only where both are integers', () => {
    expect(isOlder('9', '10')).toBe(true);
    expect(isOlder('10', '9')).toBe(false);
    expect(isOlder('10', '10')).toBe(false);
    expect(isOlder('abc', 'abd')).toBe(false);
  });
});
