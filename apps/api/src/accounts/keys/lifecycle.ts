// A key's life after creation: its settings changed (PATCH), rotated (a new key, the old one working
// through a grace period), revoked. Every change is published to the other replicas before the
// route answers, so their caches hold no stale copy of the key; writes that could never work (a
// pinned model nothing serves, an expiry in the past) are refused naming the field.
import { ApiError } from '../../platform/errors.ts';
import type { KeyConflict, KeyRecord, KeySettings, NewKey } from './repository.ts';

/** POST /api/keys/{id}/rotate: the old key's grace period by default and at most (seconds). */
export const DEFAULT_GRACE_SECONDS = 86_400;
export const MAX_GRACE_SECONDS = 30 * 86_400;

/** Says what is wrong with a pinned model for this account, or nothing when it can be called. */
export type PinnedModelCheck = (accountId: string, model: string) => string | undefined;

/** The 400 naming the field, as body validation words it. */
export function invalidField(field: string, message: string): ApiError {
  return new ApiError('validation_error', {
    message: `Invalid request body: ${field}: ${message}`,
    param: field,
  });
}

/** Refuses settings that could never work, at write time. */
export function checkSettings(
  accountId: string,
  s: Partial<KeySettings>,
  now: Date,
  pinnedModel?: PinnedModelCheck,
): void {
  if (s.pinnedModel && pinnedModel) {
    const problem = pinnedModel(accountId, s.pinnedModel);
    if (problem) throw invalidField('pinnedModel', problem);
  }
  if (s.expiresAt && s.expiresAt <= now)
    throw invalidField('expiresAt', `must be in the future (it is ${now.toISOString()} now)`);
}

/** 409 for a change or rotation of a key that can no longer be used. */
export function keyConflictError(k: KeyRecord, why: KeyConflict, action: 'change' | 'rotate'): ApiError {
  const message =
    why === 'revoked'
      ? `API key ${k.id} is revoked; create a new key instead`
      : why === 'expired'
        ? `API key ${k.id} has expired; create a new key instead`
        : action === 'rotate' && k.replacedBy
          ? `API key ${k.id} was already rotated (replaced by ${k.replacedBy}); rotate that key instead`
          : `API key ${k.id} was rotated and its grace period has ended; change its replacement ${k.replacedBy} instead`;
  return new ApiError('key_conflict', { message });
}

/**
 * The key that replaces `old`: its name, scope and settings, in its rotation line. An old key that
 * expires gives its successor the same lifetime from now, unless `expiresAt` is given (null: never).
 */
export function successor(
  old: KeyRecord,
  made: Pick<NewKey, 'id' | 'hash' | 'prefix'>,
  now: Date,
  expiresAt?: Date | null,
): NewKey {
  const lifetime = old.expiresAt ? old.expiresAt.getTime() - old.createdAt.getTime() : undefined;
  return {
    ...made,
    accountId: old.accountId,
    name: old.name,
    scope: old.scope,
    pinnedModel: old.pinnedModel,
    toolPin: old.toolPin,
    spendLimit: old.spendLimit,
    allowDearerFallback: old.allowDearerFallback,
    expiresAt:
      expiresAt !== undefined
        ? expiresAt
        : lifetime !== undefined
          ? new Date(now.getTime() + lifetime)
          : null,
    lineage: old.lineage ?? old.id,
    rotatedFrom: old.id,
  };
}
