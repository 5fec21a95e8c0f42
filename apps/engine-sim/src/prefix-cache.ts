// vLLM's automatic prefix caching, reduced to what routing can observe: a per-replica LRU of KV
// blocks keyed by the hash of every token up to the block's end. A request whose leading blocks are
// cached skips their prefill; vLLM always recomputes at least the last prompt token, so a hit covers
// at most floor((prompt - 1) / block size) blocks.
//
// Every answer's blocks pass through here, so it is built for that: fixed slots in typed arrays, a
// doubly linked recency list over them, and an open-addressing index (linear probing, backward-shift
// deletion) from key to slot. Touching, inserting and evicting are O(1) and allocate nothing; a
// JavaScript Map cost several times more per block on the throughput benchmark.

const NONE = -1;
const TWO_32 = 4294967296;

export class PrefixCache {
  private readonly capacity: number;
  private size_ = 0;
  // per slot: the 53-bit key as two int32 halves, and the recency links
  private readonly lo: Int32Array;
  private readonly hi: Int32Array;
  private readonly prev: Int32Array;
  private readonly next: Int32Array;
  /** Most recently used slot, and least recently used. */
  private head = NONE;
  private tail = NONE;
  /** Index: slot + 1 at a key's position, 0 when empty. At most half full. */
  private readonly index: Int32Array;
  private readonly mask: number;

  constructor(capacityBlocks: number) {
    this.capacity = capacityBlocks;
    this.lo = new Int32Array(capacityBlocks);
    this.hi = new Int32Array(capacityBlocks);
    this.prev = new Int32Array(capacityBlocks);
    this.next = new Int32Array(capacityBlocks);
    let n = 8;
    while (n < capacityBlocks * 2) n *= 2;
    this.index = new Int32Array(n);
    this.mask = n - 1;
  }

  get size(): number {
    return this.size_;
  }

  /** How many leading blocks (at most `maxBlocks`) are cached. Does not change recency. */
  match(blocks: readonly number[], maxBlocks: number): number {
    const limit = Math.min(maxBlocks, blocks.length);
    let n = 0;
    while (n < limit && this.find(blocks[n]!) !== NONE) n++;
    return n;
  }

  /**
   * Caches the blocks (or refreshes them), evicting the least recently used beyond capacity. The
   * head of a sequence is made the most recent, as vLLM frees a sequence's blocks tail first: a
   * tail block is useless without the blocks before it.
   */
  insert(blocks: readonly number[]): void {
    if (this.capacity === 0) return;
    for (let i = blocks.length - 1; i >= 0; i--) {
      const key = blocks[i]!;
      const at = this.find(key);
      if (at !== NONE) {
        const slot = this.index[at]! - 1;
        this.unlink(slot);
        this.pushHead(slot);
        continue;
      }
      let slot: number;
      if (this.size_ < this.capacity) slot = this.size_++;
      else {
        slot = this.tail;
        this.unlink(slot);
        this.remove(this.position(this.lo[slot]!, this.hi[slot]!));
      }
      this.lo[slot] = key | 0;
      this.hi[slot] = (key / TWO_32) | 0;
      this.add(key | 0, slot);
      this.pushHead(slot);
    }
  }

  /** vLLM's POST /reset_prefix_cache. */
  reset(): void {
    this.index.fill(0);
    this.size_ = 0;
    this.head = this.tail = NONE;
  }

  private home(lo: number): number {
    return (Math.imul(lo, 0x9e3779b1) >>> 0) & this.mask;
  }

  /** The index position holding `key`, or NONE. */
  private find(key: number): number {
    return this.position(key | 0, (key / TWO_32) | 0);
  }

  private position(lo: number, hi: number): number {
    const index = this.index;
    for (let at = this.home(lo); ; at = (at + 1) & this.mask) {
      const e = index[at]!;
      if (e === 0) return NONE;
      if (this.lo[e - 1] === lo && this.hi[e - 1] === hi) return at;
    }
  }

  private add(lo: number, slot: number): void {
    let at = this.home(lo);
    while (this.index[at] !== 0) at = (at + 1) & this.mask;
    this.index[at] = slot + 1;
  }

  /** Empties an index position, moving later entries of the probe run back so lookups stay correct. */
  private remove(at: number): void {
    const index = this.index;
    const mask = this.mask;
    let hole = at;
    index[hole] = 0;
    for (let j = (hole + 1) & mask; index[j] !== 0; j = (j + 1) & mask) {
      const home = this.home(this.lo[index[j]! - 1]!);
      // The entry at j may fill the hole unless its home lies cyclically in (hole, j].
      const stays = hole <= j ? home > hole && home <= j : home > hole || home <= j;
      if (stays) continue;
      index[hole] = index[j]!;
      index[j] = 0;
      hole = j;
    }
  }

  private unlink(slot: number): void {
    const p = this.prev[slot]!;
    const n = this.next[slot]!;
    if (p === NONE) this.head = n;
    else this.next[p] = n;
    if (n === NONE) this.tail = p;
    else this.prev[n] = p;
  }

  private pushHead(slot: number): void {
    this.prev[slot] = NONE;
    this.next[slot] = this.head;
    if (this.head !== NONE) this.prev[this.head] = slot;
    this.head = slot;
    if (this.tail === NONE) this.tail = slot;
  }
}
