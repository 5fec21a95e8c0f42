// Who a request acts for, as the HTTP layer checks it: a key's principal, and the one interface the
// auth path needs of whatever verifies keys (accounts/keys/service.ts implements it). The HTTP layer
// declares it, so it depends on no product.

export type Scope = 'inference' | 'compute' | 'global';
export const SCOPES = ['inference', 'compute', 'global'] as const satisfies readonly Scope[];

/** What the request path knows about a verified key. */
export interface Principal {
  keyId: string;
  accountId: string;
  scope: Scope;
  pinnedModel: string | null;
  toolPin: string[];
  /** Elastic fallbacks may go to catalog models dearer than the one asked for (absent: not). */
  allowDearerFallback?: boolean;
}

/** Why a key is refused: unknown or malformed, or a key that was revoked, expired or rotated out. */
export type KeyRefusal = 'invalid_api_key' | 'api_key_revoked' | 'api_key_expired' | 'api_key_rotated';

export type VerifyResult = { ok: true; principal: Principal } | { ok: false; code: KeyRefusal };

/** What a revocation of its key ends, told directly (a proxied call's scope, dedicated/proxy/scope.ts). */
export interface Revocable {
  revoke(reason: unknown): void;
}

/** A request tied to its key (KeyVerifier.track). */
export interface TrackedCall {
  /**
   * Aborts, with 401 `Invalid API key` as its reason, when the key is revoked. Made when first read:
   * a proxied call links its scope instead (`link`) and never makes one.
   */
  readonly signal: AbortSignal;
  /** Tells `target` of a revocation (at once if the key was already revoked); undefined: no longer. */
  link(target: Revocable | undefined): void;
  release(): void;
}

/** What the auth path asks of the key service. */
export interface KeyVerifier {
  verify(value: string): Promise<VerifyResult>;
  /**
   * verify() when it needs no database read (a cached key, or a malformed one), at once and without
   * a promise; undefined otherwise (then call verify()).
   */
  verifyNow?(value: string): VerifyResult | undefined;
  /**
   * Ties a request to its key: revoking the key aborts it (reason: 401 `Invalid API key`). Call
   * `release` when the request ends.
   */
  track(keyId: string): TrackedCall;
  /**
   * The key a dashboard session's inference call acts as: the account's oldest active key that may
   * call inference (spec §5.3), or null when it has none. Read from the database on every call, so a
   * revocation applies at once.
   */
  sessionPrincipal(accountId: string): Promise<Principal | null>;
}
