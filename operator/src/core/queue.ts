// A keyed work queue in the style of client-go's workqueue: a key is queued at most once, at most one
// handler runs per key, a key added while its handler runs is re-run afterwards, failures back off
// per key, and a TerminalError stops retrying until the key is added again.

/** Throw from a handler to say "retrying will not help". */
export class TerminalError extends Error {
  override name = 'TerminalError';
}

export type HandlerResult = { requeueAfterMs?: number } | void;
export type Outcome = 'success' | 'requeue' | 'error' | 'terminal';

export interface WorkQueueOptions {
  concurrency?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  onOutcome?: (key: string, outcome: Outcome, err?: unknown) => void;
}

export class WorkQueue {
  private readonly handler: (key: string) => Promise<HandlerResult>;
  private readonly opts: WorkQueueOptions;
  private readonly pending: string[] = [];
  private readonly queued = new Set<string>();
  private readonly active = new Set<string>();
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly timers = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private readonly running = new Set<Promise<void>>();
  private stopped = false;
  private readonly concurrency: number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;

  constructor(handler: (key: string) => Promise<HandlerResult>, opts: WorkQueueOptions = {}) {
    this.handler = handler;
    this.opts = opts;
    this.concurrency = opts.concurrency ?? 4;
    this.baseDelayMs = opts.baseDelayMs ?? 500;
    this.maxDelayMs = opts.maxDelayMs ?? 5 * 60_000;
  }

  /** Keys waiting (not counting ones being processed). */
  get depth(): number {
    return this.pending.length;
  }

  /**
   * Queues the key (once). `urgent` puts it first, ahead of keys queued before it, and moves it to
   * the front when it is queued already: a wake must not wait behind a resync of every endpoint.
   */
  add(key: string, urgent = false): void {
    if (this.stopped) return;
    if (this.active.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.queued.has(key)) {
      if (!urgent || this.pending[0] === key) return;
      this.pending.splice(this.pending.indexOf(key), 1);
      this.pending.unshift(key);
      return;
    }
    this.queued.add(key);
    if (urgent) this.pending.unshift(key);
    else this.pending.push(key);
    this.pump();
  }

  /** Add after a delay; an earlier pending delay for the same key wins. */
  addAfter(key: string, ms: number): void {
    if (this.stopped) return;
    if (ms <= 0) return this.add(key);
    const at = Date.now() + ms;
    const existing = this.timers.get(key);
    if (existing && existing.at <= at) return;
    if (existing) clearTimeout(existing.timer);
    const timer = setTimeout(() => {
      this.timers.delete(key);
      this.add(key);
    }, ms);
    timer.unref();
    this.timers.set(key, { at, timer });
  }

  /** Per-key exponential backoff delay for the next retry. */
  backoffMs(key: string): number {
    const n = this.failures.get(key) ?? 0;
    return Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** n);
  }

  /** Stop taking keys, cancel delayed ones, wait for the handlers in flight. */
  async shutdown(): Promise<void> {
    this.stopped = true;
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    this.pending.length = 0;
    this.queued.clear();
    this.dirty.clear();
    await Promise.allSettled([...this.running]);
  }

  private pump(): void {
    while (!this.stopped && this.active.size < this.concurrency && this.pending.length > 0) {
      const key = this.pending.shift()!;
      this.queued.delete(key);
      this.active.add(key);
      const p = this.process(key).finally(() => {
        this.running.delete(p);
        this.active.delete(key);
        if (this.dirty.delete(key)) this.add(key);
        this.pump();
      });
      this.running.add(p);
    }
  }

  private async process(key: string): Promise<void> {
    try {
      const result = await this.handler(key);
      this.failures.delete(key);
      if (result?.requeueAfterMs !== undefined) {
        this.opts.onOutcome?.(key, 'requeue');
        this.addAfter(key, result.requeueAfterMs);
      } else this.opts.onOutcome?.(key, 'success');
    } catch (err) {
      if (err instanceof TerminalError) {
        this.failures.delete(key);
        this.opts.onOutcome?.(key, 'terminal', err);
        return;
      }
      const delay = this.backoffMs(key);
      this.failures.set(key, (this.failures.get(key) ?? 0) + 1);
      this.opts.onOutcome?.(key, 'error', err);
      this.addAfter(key, delay);
    }
  }
}
