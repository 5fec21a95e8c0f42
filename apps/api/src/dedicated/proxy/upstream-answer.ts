// One upstream call through undici's `dispatch()` and a handler of our own, in place of `request()`:
// `request()` wraps every call in an AsyncResource, parses every response header into an object and
// makes a body stream even for an answer read whole; an answer here is read whole into one Buffer, or
// made a stream only when it is one (an SSE answer). The handler is undici's own interface
// (onConnect, onHeaders, onData, onComplete, onError), which its client calls directly.
import { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';

type Mode = 'pending' | 'whole' | 'stream';

/**
 * An upstream answer once its headers arrived: its status and content type, and its body read whole
 * (read), as a stream (stream) or dropped (dump), chosen once. Until then its chunks are kept.
 */
export interface UpstreamAnswer {
  statusCode: number;
  /** The answer's Content-Type, if it has one. */
  contentType: string | undefined;
  /** The whole body; past `limit` bytes the rest is read and dropped. */
  read(limit?: number): Promise<Buffer>;
  /** The body as a readable stream; destroying it aborts the call. */
  stream(): Readable;
  /** Reads the body to its end and drops it (the connection is kept). */
  dump(): Promise<void>;
  /** Called once, when the answer ended, failed or was aborted. */
  whenDone(fn: (err?: unknown) => void): void;
}

const CONTENT_TYPE = 'content-type';
/** What dump() reads of an answer before it closes the connection instead (undici's own: 128 KiB). */
const DUMP_LIMIT = 128 * 1024;

/** The Content-Type among raw headers ([name, value, name, value…], Buffers or strings). */
function contentTypeOf(raw: (Buffer | string)[] | null): string | undefined {
  if (!raw) return undefined;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === CONTENT_TYPE.length && name.toString().toLowerCase() === CONTENT_TYPE)
      return raw[i + 1]!.toString();
  }
  return undefined;
}

class AnswerHandler implements UpstreamAnswer {
  statusCode = 0;
  contentType: string | undefined = undefined;
  private mode: Mode = 'pending';
  private chunks: Buffer[] = [];
  private size = 0;
  private limit = Infinity;
  private complete = false;
  private dumping = false;
  private error: unknown = undefined;
  private abortFn: ((err: Error) => void) | undefined = undefined;
  private resumeFn: (() => void) | undefined = undefined;
  private body: Readable | undefined = undefined;
  private settle: ((v: Buffer) => void) | undefined = undefined;
  private fail: ((err: unknown) => void) | undefined = undefined;
  private done: ((err?: unknown) => void)[] | undefined = undefined;
  private readonly onAbort: (() => void) | undefined;
  private readonly signal: AbortSignal | undefined;
  private readonly headed: (answer: UpstreamAnswer) => void;
  private readonly failed: (err: unknown) => void;

  constructor(
    signal: AbortSignal | undefined,
    headed: (answer: UpstreamAnswer) => void,
    failed: (err: unknown) => void,
  ) {
    this.signal = signal;
    this.headed = headed;
    this.failed = failed;
    if (signal && !signal.aborted) {
      this.onAbort = () => this.abort(signal.reason);
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
  }

  /** Aborts the call; the answer fails with `reason` (the signal's, as request() did). */
  private abort(reason: unknown): void {
    const err = (reason ?? new Error('The call was aborted')) as Error;
    if (this.abortFn) this.abortFn(err);
    else this.error ??= err; // before onConnect: refused there
  }

  private finish(err?: unknown): void {
    if (this.onAbort) this.signal!.removeEventListener('abort', this.onAbort);
    const done = this.done;
    this.done = undefined;
    if (done) for (const fn of done) fn(err);
  }

  // --- undici's handler interface

  onConnect(abort: (err: Error) => void): void {
    if (this.error !== undefined) abort(this.error as Error);
    else if (this.signal?.aborted) abort(this.signal.reason as Error);
    else this.abortFn = abort;
  }

  onHeaders(statusCode: number, raw: (Buffer | string)[] | null, resume: () => void): boolean {
    if (statusCode < 200) return true; // 1xx
    this.statusCode = statusCode;
    this.contentType = contentTypeOf(raw);
    this.resumeFn = resume;
    this.headed(this);
    return true;
  }

  onData(chunk: Buffer): boolean {
    switch (this.mode) {
      case 'stream':
        return this.body!.push(chunk);
      default:
        if (this.size < this.limit) this.chunks.push(chunk);
        this.size += chunk.length;
        // A dropped answer is read to its end to keep the connection, up to DUMP_LIMIT.
        if (this.dumping && this.size > DUMP_LIMIT && this.error === undefined)
          this.abort(new Error('The answer was dropped'));
        return true;
    }
  }

  onComplete(): void {
    this.complete = true;
    if (this.mode === 'stream') this.body!.push(null);
    else if (this.settle) this.settle(this.whole());
    this.finish();
  }

  onError(err: Error): void {
    this.error = err;
    if (this.statusCode === 0) this.failed(err);
    else if (this.mode === 'stream') this.body!.destroy(err);
    else this.fail?.(err);
    this.finish(err);
  }

  // --- the answer

  private whole(): Buffer {
    const chunks = this.chunks;
    this.chunks = [];
    const buf = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    return buf.length > this.limit ? buf.subarray(0, this.limit) : buf;
  }

  private choose(mode: Mode): void {
    if (this.mode !== 'pending') throw new Error(`the answer's body is already taken (${this.mode})`);
    this.mode = mode;
  }

  read(limit = Infinity): Promise<Buffer> {
    this.choose('whole');
    this.limit = limit;
    if (this.complete) return Promise.resolve(this.whole());
    if (this.error !== undefined) return Promise.reject(this.error);
    return new Promise<Buffer>((resolve, reject) => {
      this.settle = resolve;
      this.fail = reject;
    });
  }

  dump(): Promise<void> {
    this.chunks = [];
    this.dumping = true;
    if (this.size > DUMP_LIMIT && !this.complete && this.error === undefined)
      this.abort(new Error('The answer was dropped'));
    // Never rejects: an answer being dropped that fails (or is cut for its size) only loses its
    // connection, as undici's own dump().
    return this.read(0).then(
      () => undefined,
      () => undefined,
    );
  }

  stream(): Readable {
    this.choose('stream');
    const body = new Readable({
      read: () => this.resumeFn?.(),
      destroy: (err, cb) => {
        if (!this.complete && this.error === undefined)
          this.abort(err ?? new Error('The answer was dropped'));
        cb(err);
      },
    });
    this.body = body;
    for (const chunk of this.chunks) body.push(chunk);
    this.chunks = [];
    if (this.complete) body.push(null);
    else if (this.error !== undefined) body.destroy(this.error as Error);
    return body;
  }

  whenDone(fn: (err?: unknown) => void): void {
    if (this.complete || this.error !== undefined) fn(this.error);
    else (this.done ??= []).push(fn);
  }
}

/** Sends one request; resolves with the answer once its headers arrived, rejects on a failure before. */
export function dispatchCall(
  dispatcher: Dispatcher,
  opts: Dispatcher.DispatchOptions,
  signal?: AbortSignal,
): Promise<UpstreamAnswer> {
  return new Promise((resolve, reject) => {
    const handler = new AnswerHandler(signal, resolve, reject);
    try {
      dispatcher.dispatch(opts, handler as unknown as Dispatcher.DispatchHandler);
    } catch (err) {
      handler.onError(err as Error);
    }
  });
}
