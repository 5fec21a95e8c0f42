import { z } from 'zod';
import { ApiError } from '../platform/errors.ts';

/**
 * Parses with a zod schema; a failure is a 400 that names the first offending field — or, with
 * `every`, each of them in order (`Invalid request body: name: is required; schedule: …`), `param`
 * naming the first. A custom check on the whole value (no field) speaks for itself: its message is
 * the error's. No body at all is refused unless the schema is optional (or has a default).
 */
export function parse<S extends z.ZodType>(
  schema: S,
  value: unknown,
  what = 'request body',
  options: { every?: boolean } = {},
): z.infer<S> {
  // The OpenAI body check of every proxied call: the same 400, without zod's machinery.
  if ((schema as z.ZodType) === jsonObjectBody) return jsonObject(value) as z.infer<S>;
  if (value === undefined && !schema.isOptional()) {
    throw new ApiError('validation_error', { message: `The ${what} must be a JSON object` });
  }
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issues = options.every ? result.error.issues : result.error.issues.slice(0, 1);
  const first = issues[0]!.path.join('.');
  const described = issues.map((issue) => {
    const field = issue.path.join('.');
    return field ? `${field}: ${issue.message}` : issue.message;
  });
  const only = issues.length === 1 ? issues[0]! : undefined;
  const message =
    only && !first && only.code === 'custom' ? only.message : `Invalid ${what}: ${described.join('; ')}`;
  throw new ApiError('validation_error', { message, param: first || null });
}

/** 400 `Invalid request body: <param>: <message>`, for a check zod did not make. */
export function invalidBody(message: string, param: string): ApiError {
  return new ApiError('validation_error', { message: `Invalid request body: ${param}: ${message}`, param });
}

const JSON_OBJECT_REQUIRED = 'The request body must be a JSON object';

/** An OpenAI-style body: any JSON object, passed through to the engine as it is. */
export const jsonObjectBody = z
  .custom<Record<string, unknown>>((v) => typeof v === 'object' && v !== null && !Array.isArray(v), {
    error: JSON_OBJECT_REQUIRED,
  })
  .meta({ type: 'object', description: 'An OpenAI-compatible request body, passed through to the engine' });

/** How deeply a JSON body may nest (objects and arrays): deeper ones are refused before any use. */
export const MAX_JSON_DEPTH = 64;

// A NUL cannot be stored in PostgreSQL text; a lone surrogate is not Unicode (it would be stored as
// U+FFFD, silently changed).
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * Checks a parsed JSON value before a route's schema sees it: nesting at most MAX_JSON_DEPTH (a
 * 100k-deep array would overflow the stack of whatever serialises it next), and — with `text` —
 * strings (keys included) a database can store. 400 `validation_error` naming the place otherwise.
 */
export function checkJson(value: unknown, what: string, options: { text: boolean }): void {
  walkJson(value, 0, [], what, options.text);
}

// checkJson's walk: one function for the whole process, not closures made per request. `keys` are
// the keys down to the value being checked; its place's name is built only for an error.
function walkJson(v: unknown, depth: number, keys: string[], what: string, text: boolean): void {
  if (typeof v === 'string') {
    if (text && UNSTORABLE.test(v)) {
      const at = keys.join('.');
      throw new ApiError('validation_error', {
        message: `Invalid ${what}: ${at || 'value'}: must not contain NUL characters or unpaired surrogates`,
        param: at || null,
      });
    }
    return;
  }
  if (typeof v !== 'object' || v === null) return;
  if (depth >= MAX_JSON_DEPTH) {
    const at = keys.join('.');
    throw new ApiError('validation_error', {
      message: `Invalid ${what}: nested more than ${MAX_JSON_DEPTH} levels deep`,
      param: at || null,
    });
  }
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (text && UNSTORABLE.test(k))
      throw new ApiError('validation_error', {
        message: `Invalid ${what}: a field name must not contain NUL characters or unpaired surrogates`,
        param: null,
      });
    keys.push(k);
    walkJson(o[k], depth + 1, keys, what, text);
    keys.pop();
  }
}

/** parse(jsonObjectBody, value): the same 400 for anything but a JSON object, without zod. */
function jsonObject(value: unknown): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new ApiError('validation_error', { message: JSON_OBJECT_REQUIRED, param: null });
  return value as Record<string, unknown>;
}

/** A human-readable name: no control characters (a newline would forge lines in logs). */
export const humanName = (max: number) =>
  z
    .string()
    .trim()
    .min(1, 'must not be empty')
    .max(max, `must be at most ${max} characters`)
    .regex(/^[^\p{Cc}\u2028\u2029]*$/u, 'must not contain control characters (such as newlines)');
