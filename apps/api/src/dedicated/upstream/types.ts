// "Give me an upstream": the one call between an authorized request and the bytes forwarded. It owns
// waking the backend, holding the request while it wakes, picking a replica, counting the request in
// flight and releasing it, the way KubeAI's AwaitBestAddress does; forward() only asks it where each
// attempt goes.
//
// How a backend kind plugs in: implement `Upstream<Target>` for what a call resolves to. Two do:
// - Platform-owned dedicated endpoints (./endpoint-upstream.ts) are `Upstream<DedicatedEndpoint>`:
//   phase gate, wake and hold, then a lease whose `next()` picks among the endpoint's Ready replicas.
// - An external OpenAI-compatible base URL (elastic/external-upstream.ts) is
//   `Upstream<{ baseUrl: string }>`: nothing to wake or hold, `acquire` resolves at once with a lease
//   whose `next()` returns that base URL.
// An Elastic catalog entry is not one more Upstream: its backends, of either kind, are tried in
// order by the Elastic caller (elastic/call.ts), which owns fallbacks and cool-downs.
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

/** A call that waited for its backend to wake (a cold start). */
export interface HeldThroughWake {
  /** How long it was held, in milliseconds. */
  heldMs: number;
  /** The first byte of its answer went to the caller (once per wake counts: metrics and the receipt). */
  firstByte(): void;
}

/** Why no upstream was given. Each is a value, not an error: the route decides what the caller sees. */
export type Refusal =
  /** Still being provisioned: it cannot be called yet. */
  | { reason: 'building' }
  /** Failed; retrying cannot help. The endpoint as last seen, for its reason and message. */
  | { reason: 'failed'; endpoint: DedicatedEndpoint }
  /** Waking, and the caller asked not to be held. Retry after `retryAfter` seconds. */
  | { reason: 'waking'; retryAfter: number }
  /** Not ready within the hold. */
  | { reason: 'timeout'; retryAfter: number }
  /** Waking, and already holding as many calls as it may (`limit`, scaling.maxHeldRequests). */
  | { reason: 'full'; retryAfter: number; limit: number }
  /** Deleted while the call was held. */
  | { reason: 'deleted' }
  /** The options' signal ended the hold. */
  | { reason: 'aborted' };

export type Acquired = { ok: true; lease: Lease; wake?: HeldThroughWake } | ({ ok: false } & Refusal);

export interface Upstream<Target> {
  /** Resolves once the call may be forwarded (with a lease it must release), or with a refusal. */
  acquire(target: Target, options: AcquireOptions): Promise<Acquired>;
}
