// Lifecycle as a stack: each part of the API pushes its closer as it starts, and closing pops them,
// the last started first — so nothing is closed while a part started after it may still use it, and
// a start-up that fails half-way closes exactly what it had started.
export class Closers {
  private readonly stack: (() => unknown)[] = [];

  push(close: () => unknown): void {
    this.stack.push(close);
  }

  async close(): Promise<void> {
    for (let next = this.stack.pop(); next; next = this.stack.pop()) await next();
  }
}
