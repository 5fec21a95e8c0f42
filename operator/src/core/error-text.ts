/** A short description of an error for logs: an ApiException's HTTP code and Status message, else its message. */
export function errorText(err: unknown): string {
  const e = err as { code?: number; body?: unknown; message?: string };
  let message = e.message ?? String(err);
  try {
    const body = typeof e.body === 'string' ? JSON.parse(e.body) : e.body;
    if (body && typeof body === 'object' && 'message' in body)
      message = String((body as { message: unknown }).message);
  } catch {
    // not JSON: keep the exception message
  }
  return e.code ? `HTTP ${e.code}: ${message}` : message;
}
