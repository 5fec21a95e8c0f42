// The bytes a JSON request body arrived as, kept beside the object they were parsed into, so a proxy
// that forwards the body unchanged sends those bytes instead of serialising the object again (for a
// 220 KB prompt, JSON.stringify is most of the work of a call). Only bytes that JSON.stringify's
// output could stand in for are kept: valid UTF-8 without a byte-order mark. The object must not be
// changed after it is parsed (the code that changes a body makes a new object: `{ ...body, … }`).
import { isUtf8 } from 'node:buffer';

const bytes = new WeakMap<object, Buffer>();

/** Keeps `buf` as the bytes of `body` (a parsed JSON object) when they can be forwarded as they are. */
export function keepBodyBytes(body: unknown, buf: Buffer): void {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return;
  if (buf[0] === 0xef || !isUtf8(buf)) return; // a BOM (JSON.parse never saw it), or not UTF-8
  bytes.set(body, buf);
}

/** The bytes `body` arrived as, if it is a request body kept by keepBodyBytes, unchanged since. */
export function bodyBytes(body: object): Buffer | undefined {
  return bytes.get(body);
}

const LAST_BRACE = 0x7d;
const WHITESPACE = new Set([0x20, 0x09, 0x0a, 0x0d]);

/**
 * `body`'s bytes with one more member appended — `member` is its bytes, `,"<name>":<JSON>` — as
 * `{ ...body, [name]: value }` serialises when `body` has no `name`; or undefined when that cannot be
 * done on the bytes (no bytes kept, `name` already present, an empty object).
 */
export function bodyBytesWith(
  body: Record<string, unknown>,
  name: string,
  member: Buffer,
): Buffer | undefined {
  const buf = bytes.get(body);
  if (!buf || Object.hasOwn(body, name)) return undefined;
  let end = buf.length - 1;
  while (end > 0 && WHITESPACE.has(buf[end]!)) end--;
  if (buf[end] !== LAST_BRACE) return undefined;
  let before = end - 1;
  while (before > 0 && WHITESPACE.has(buf[before]!)) before--;
  if (buf[before] === 0x7b /* { : no member yet */) return undefined;
  return Buffer.concat([buf.subarray(0, end), member, buf.subarray(end)]);
}

const ESCAPED_UNICODE = Buffer.from('\\u');
const COLON = 0x3a;

/**
 * `{ ...body, [name]: value }` (a string value), with the bytes it serialises to kept beside it
 * (bodyBytes) when they can be made from `body`'s own: the member appended (bodyBytesWith) when
 * `body` has no `name`, or its string value replaced on the bytes when `body[name]` is a string
 * spelled in them exactly as JSON.stringify spells it. The member found must be the top-level one:
 * the bytes hold `"<name>"` once and no `\u` escape (the only other spelling of a key).
 */
export function withMember(
  body: Record<string, unknown>,
  name: string,
  value: string,
): Record<string, unknown> {
  const next = { ...body, [name]: value };
  const buf = bytes.get(body);
  if (!buf) return next;
  const json = Buffer.from(JSON.stringify(value));
  const old = body[name];
  if (!Object.hasOwn(body, name)) {
    const made = bodyBytesWith(body, name, Buffer.concat([Buffer.from(`,${JSON.stringify(name)}:`), json]));
    if (made) bytes.set(next, made);
    return next;
  }
  if (typeof old !== 'string' || buf.includes(ESCAPED_UNICODE)) return next;
  const key = Buffer.from(JSON.stringify(name));
  const at = buf.indexOf(key);
  if (at === -1 || buf.indexOf(key, at + key.length) !== -1) return next;
  let i = at + key.length;
  while (WHITESPACE.has(buf[i]!)) i++;
  if (buf[i] !== COLON) return next;
  i++;
  while (WHITESPACE.has(buf[i]!)) i++;
  const was = Buffer.from(JSON.stringify(old));
  if (!buf.subarray(i, i + was.length).equals(was)) return next;
  bytes.set(next, Buffer.concat([buf.subarray(0, i), json, buf.subarray(i + was.length)]));
  return next;
}
