// Prompt material shared by the routing benchmark and the routing end-to-end test.

/** n distinct words tagged with `tag` (one token each in the engine simulator's tokenizer). */
export const words = (n: number, tag: string) => Array.from({ length: n }, (_, i) => `${tag}w${i}`).join(' ');

/**
 * 0…n-1 in a seeded order (the same for every strategy compared), so a strict rotation over the
 * replicas cannot line conversations up with replicas by chance.
 */
export function shuffled(n: number, seed: number): number[] {
  const a = Array.from({ length: n }, (_, i) => i);
  let s = seed >>> 0 || 1;
  for (let i = n - 1; i > 0; i--) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    const j = s % (i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}
