// What Berth reads from a managed tool's MCP server is bounded (MANAGED_TOOL_MAX_RESPONSE_BYTES): the
// fetch under the official SDK's transport counts each answer's bytes and stops reading past the
// limit. The SDK would otherwise read any answer whole — a 100 MB tools/list grew the API by 900 MB in
// 4 calls, and a 50 MB tool result was charged and then sent to the model, which refused it.
//
// An answer past the limit is replaced by a JSON-RPC error for the request it answers (the SDK then
// rejects that request at once, with TOO_LARGE_CODE): a JSON body is read up to the limit (or refused
// from its Content-Length), an event stream is passed through until the limit and then ended with
// that error as its last event. The standalone GET stream of server-initiated messages is never
// opened: a session lives for one request and takes no sampling or notifications.
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';

/** The JSON-RPC error code of an answer cut at the limit (implementation-defined server-error range). */
export const TOO_LARGE_CODE = -32090;

export function tooLargeMessage(maxBytes: number): string {
  return `the tool server's answer is larger than ${maxBytes} bytes (MANAGED_TOOL_MAX_RESPONSE_BYTES), so it was not read`;
}

/** The id of the JSON-RPC request a POST carries; undefined for a notification or a response. */
function requestIdOf(body: RequestInit['body']): string | number | undefined {
  if (typeof body !== 'string') return undefined;
  try {
    const m = JSON.parse(body) as { id?: unknown; method?: unknown };
    if (typeof m.method !== 'string') return undefined;
    return typeof m.id === 'string' || typeof m.id === 'number' ? m.id : undefined;
  } catch {
    return undefined;
  }
}

const errorFor = (id: string | number, maxBytes: number) =>
  JSON.stringify({ jsonrpc: '2.0', id, error: { code: TOO_LARGE_CODE, message: tooLargeMessage(maxBytes) } });

/** An event stream passed through up to `maxBytes`, then ended with the error as a last event. */
function capEvents(maxBytes: number, id: string | number): TransformStream<Uint8Array, Uint8Array> {
  let size = 0;
  const last = new TextEncoder().encode(`\n\nevent: message\ndata: ${errorFor(id, maxBytes)}\n\n`);
  return new TransformStream({
    transform(chunk, controller) {
      size += chunk.byteLength;
      if (size <= maxBytes) return controller.enqueue(chunk);
      // The blank line ends the event that was cut (the SDK drops it: its JSON does not parse).
      controller.enqueue(last);
      controller.terminate(); // the server's stream is cancelled: its connection closes
    },
  });
}

/** A JSON body read up to `maxBytes`; undefined (and the body cancelled) when it is larger. */
async function readUpTo(body: ReadableStream<Uint8Array>, maxBytes: number): Promise<Uint8Array | undefined> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => {});
      return undefined;
    }
    chunks.push(value);
  }
  const all = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  return all;
}

/** The transport's fetch, reading at most `maxBytes` of each answer. */
export function cappedFetch(maxBytes: number, base: FetchLike = fetch): FetchLike {
  return async (url, init) => {
    if ((init?.method ?? 'GET').toUpperCase() === 'GET') return new Response(null, { status: 405 });
    const res = await base(url, init);
    const id = requestIdOf(init?.body);
    // A notification's answer is discarded by the SDK unread; an error status is read as text by it,
    // bounded here like the rest.
    if (id === undefined || !res.body) return res;
    const tooLarge = () =>
      new Response(errorFor(id, maxBytes), { status: 200, headers: { 'content-type': 'application/json' } });
    if (Number(res.headers.get('content-length')) > maxBytes) {
      await res.body.cancel().catch(() => {});
      return tooLarge();
    }
    const headers = new Headers(res.headers);
    headers.delete('content-length');
    headers.delete('content-encoding'); // fetch decoded it
    const type = res.headers.get('content-type')?.split(';')[0]?.trim().toLowerCase();
    if (type === 'text/event-stream')
      return new Response(res.body.pipeThrough(capEvents(maxBytes, id)), { status: res.status, headers });
    const bytes = await readUpTo(res.body, maxBytes);
    return bytes ? new Response(bytes, { status: res.status, headers }) : tooLarge();
  };
}
