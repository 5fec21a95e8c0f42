import type { z } from 'zod';
import { ApiError } from '../errors.ts';

/** Parses with a zod schema; a failure is a 400 that names the first offending field. */
export function parse<S extends z.ZodType>(schema: S, value: unknown, what = 'request body'): z.infer<S> {
  if (value === undefined) {
    throw new ApiError('validation_error', { message: `The ${what} must be a JSON object` });
  }
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const field = issue.path.join('.');
  const message = field ? `Invalid ${what}: ${field}: ${issue.message}` : `Invalid ${what}: ${issue.message}`;
  return fail(message, field || null);
}

function fail(message: string, param: string | null): never {
  throw new ApiError('validation_error', { message, param });
}
