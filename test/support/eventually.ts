// Polls until a check passes, for tests that assert the final state of an asynchronous system
// (a controller, a scheduler, kwok) without fixed sleeps. The check passes by returning without
// throwing (or a value other than `false`); the last error is reported on timeout.

export interface EventuallyOptions {
  /** Give up after this many milliseconds (default 30 000). */
  timeout?: number;
  /** Wait this long between attempts (default 250). */
  interval?: number;
  /** Named in the timeout error. */
  description?: string;
}

export async function eventually<T>(
  fn: () => T | Promise<T>,
  { timeout = 30_000, interval = 250, description }: EventuallyOptions = {},
): Promise<Exclude<T, false>> {
  const deadline = Date.now() + timeout;
  let attempts = 0;
  let lastError: unknown;
  for (;;) {
    attempts++;
    try {
      const result = await fn();
      if (result !== false) return result as Exclude<T, false>;
      lastError = new Error('check returned false');
    } catch (err) {
      lastError = err;
    }
    if (Date.now() + interval > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, interval));
  }
  const what = description ? ` (${description})` : '';
  const cause = lastError instanceof Error ? lastError.message : String(lastError);
  throw new Error(`eventually${what}: still failing after ${timeout} ms and ${attempts} attempts: ${cause}`, {
    cause: lastError,
  });
}
