/** A tiny per-key listener registry: the watches runtimes offer (`watch(id, fn)` → unsubscribe). */
export class Listeners<T> {
  private readonly byKey = new Map<string, Set<(v: T) => void>>();

  add(key: string, fn: (v: T) => void): () => void {
    let set = this.byKey.get(key);
    if (!set) this.byKey.set(key, (set = new Set()));
    set.add(fn);
    return () => {
      set.delete(fn);
      if (set.size === 0) this.byKey.delete(key);
    };
  }

  emit(key: string, value: T): void {
    const set = this.byKey.get(key);
    if (set) for (const fn of [...set]) fn(value);
  }
}
