import { z } from 'zod';
import { ApiError } from '../errors.ts';

/**
 * Parses with a zod schema; a failure is a 400 that names the first offending field. A custom check
 * on the whole value (no field) speaks for itself: its message is the error's. No body at all is
 * refused unless the schema is optional (or has a default).
 */
export function parse<S extends z.ZodType>(schema: S, value: unknown, what = 'request body'): z.infer<S> {
  if (value === undefined && !schema.isOptional()) {
    throw new ApiError('validation_error', { message: `The ${what} must be a JSON object` });
  }
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const field = issue.path.join('.');
  const message = field
    ? `Invalid ${what}: ${field}: ${issue.message}`
    : issue.code === 'custom'
      ? issue.message
      : `Invalid ${what}: ${issue.message}`;
  throw new ApiError('validation_error', { message, param: field || null });
}

/** An OpenAI-style body: any JSON object, passed through to the engine as it is. */
export const jsonObjectBody = z
  .custom<Record<string, unknown>>((v) => typeof v === 'object' && v !== null && !Array.isArray(v), {
    error: 'The request body must be a JSON object',
  })
  .meta({ type: 'object', description: 'An OpenAI-compatible request body, passed through to the engine' });
