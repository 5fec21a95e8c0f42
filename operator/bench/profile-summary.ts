// Summarises a .cpuprofile (endpoints.ts with BERTH_BENCH_CPU_PROFILE): self time by package or
// source directory, and the functions with the most self time.
// Usage: node --import tsx operator/bench/profile-summary.ts FILE.cpuprofile [TOP]
import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
interface Profile {
  nodes: Node[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

const file = process.argv[2];
if (!file) throw new Error('usage: profile-summary.ts FILE.cpuprofile [TOP]');
const top = Number(process.argv[3] ?? 30);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
// Self time per node: each sample's time delta goes to the node sampled.
const self = new Map<number, number>();
profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
const total = [...self.values()].reduce((a, b) => a + b, 0);

/** Where a frame lives: a package in node_modules, a directory of ours, node's own code, or V8. */
function where(url: string, fn: string): string {
  if (!url) return fn.startsWith('(') ? fn : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return 'node:' + url.slice(5).split('/')[0];
  const ours = /\/(operator\/src\/[^/]+|operator\/bench|test\/[^/]+|crds\/[^/]+)/.exec(url);
  return ours ? ours[1]! : url;
}

const byWhere = new Map<string, number>();
const byFunction = new Map<string, number>();
for (const [id, t] of self) {
  const n = byId.get(id)!;
  const w = where(n.callFrame.url, n.callFrame.functionName);
  byWhere.set(w, (byWhere.get(w) ?? 0) + t);
  const f = `${n.callFrame.functionName || '(anonymous)'} ${w}:${n.callFrame.lineNumber + 1}`;
  byFunction.set(f, (byFunction.get(f) ?? 0) + t);
}
// Inclusive time per function (once per sample however deep it recurses).
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const key = (n: Node) =>
  `${n.callFrame.functionName || '(anonymous)'} ${where(n.callFrame.url, n.callFrame.functionName)}:${n.callFrame.lineNumber + 1}`;
const inclusive = new Map<string, number>();
profile.samples.forEach((id, i) => {
  const seen = new Set<string>();
  for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) seen.add(key(byId.get(at)!));
  for (const k of seen) inclusive.set(k, (inclusive.get(k) ?? 0) + (profile.timeDeltas[i] ?? 0));
});
const oursInclusive = new Map([...inclusive].filter(([k]) => / (operator\/src|crds)\//.test(k)));

const rows = (m: Map<string, number>, k: number) =>
  [...m]
    .sort(([, a], [, b]) => b - a)
    .slice(0, k)
    .map(
      ([name, t]) =>
        `${(t / 1e6).toFixed(2).padStart(8)} s ${((100 * t) / total).toFixed(1).padStart(5)}%  ${name}`,
    )
    .join('\n');
process.stdout.write(
  `profile: ${((profile.endTime - profile.startTime) / 1e6).toFixed(1)} s wall, ${(total / 1e6).toFixed(1)} s sampled\n\n` +
    `self time by where:\n${rows(byWhere, 25)}\n\nself time by function:\n${rows(byFunction, top)}\n\n` +
    `inclusive time, the operator's own functions:\n${rows(oursInclusive, top)}\n`,
);
