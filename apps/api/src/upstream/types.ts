// "Give me an upstream": the one call between an authorized request and the bytes forwarded. It owns
// waking the backend, holding the request while it wakes, picking a replica, counting the request in
// flight and releasing it, the way KubeAI's AwaitBestAddress does; forward() only asks it where each
// attempt goes.
//
// How a backend kind plugs in: implement `Upstream<Target>` for what a route resolves a request to.
// - Platform-owned dedicated endpoints (./platform.ts) are `Upstream<DedicatedEndpoint>`: phase gate,
//   wake and hold, then a lease whose `next()` picks among the endpoint's Ready replicas.
// - An external OpenAI-compatible base URL is `Upstream<{ baseUrl: string }>`: nothing to wake or hold,
//   `acquire` resolves at once with a lease whose `next()` returns that base URL (and whose `release()`
//   counts down whatever it counts against a capacity). An Elastic catalog entry with several backends
//   of either kind is one more Upstream that resolves the entry to one of them and delegates.
// - Replica choice is a `ReplicaPicker` (./replicas.ts), one per routing strategy; the endpoint's
//   `spec.routing.strategy` names it and the call's affinity key (./affinity.ts) feeds prefixAffinity.

import type { DedicatedEndpoint } from '@berth/crds';

/** Where each attempt of a forwarded call goes. A retry asks again (and gets another replica if any). */
export interface AddressSource {
  /** An OpenAI base URL such as `http://10.0.0.7:8000/v1`, or undefined when nothing can take the call. */
  next(): string | undefined;
}

/** An upstream acquired for one call: its addresses, and `release()` once the answer is over (idempotent). */
export interface Lease extends AddressSource {
  release(): void;
}

export interface AcquireOptions {
  /** How long to hold the call while the backend wakes, in milliseconds; 0 answers `waking` at once. */
  hold: number;
  /** Ends a hold early: the client went away, its key was revoked, or the wall-clock limit passed. */
  signal: AbortSignal;
  /** The call's affinity key (./affinity.ts) for the prefixAffinity strategy; absent: none. */
  key?: number;
}

/** Why no upstream was given. Each is a value, not an error: the route decides what the caller sees. */
export type Refusal =
  /** Still being provisioned: it cannot be called yet. */
  | { reason: 'building' }
  /** Failed; retrying cannot help. The endpoint as last seen, for its reason and message. */
  | { reason: 'failed'; endpoint: DedicatedEndpoint }
  /** Waking, and the caller asked not to be held. */
  | { reason: 'waking' }
  /** Not ready within the hold. */
  | { reason: 'timeout' }
  /** Deleted while the call was held. */
  | { reason: 'deleted' }
  /** The options' signal ended the hold. */
  | { reason: 'aborted' };

export type Acquired = { ok: true; lease: Lease } | ({ ok: false } & Refusal);

export interface Upstream<Target> {
  /** Resolves once the call may be forwarded (with a lease it must release), or with a refusal. */
  acquire(target: Target, options: AcquireOptions): Promise<Acquired>;
}
