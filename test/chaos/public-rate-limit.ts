// `npm run chaos -- public-rate-limit`: a Public endpoint's rate limits with two API replicas sharing
// Redis, over CHAOS_RL_WINDOWS whole one-minute windows (default 3), with limits
// CHAOS_RL_PER_ENDPOINT (120) and CHAOS_RL_PER_CLIENT (30) a minute: each window a heavy client sends
// 3× its limit, then CHAOS_RL_CROWD (8) clients call every CHAOS_RL_PAUSE_MS (100) until 3 s before
// the window ends, alternating replicas. Passes when every window admitted exactly the endpoint's
// limit (not twice it), the heavy client exactly its own, no crowd client more than its own, both
// replicas admitted some, and every refusal was a 429 with Retry-After; and when the control (the same
// replicas without Redis, CHAOS_RL_CONTROL=1) admits more than the limit (test/support/public-rate-limit.ts).
import { limitsHeld, publicLimitAcrossReplicas, type RateLimitRun } from '../support/public-rate-limit.ts';
import { knob, report } from './lib.ts';

export async function publicRateLimit(): Promise<{ text: string; passed: boolean }> {
  const started = Date.now();
  const run: RateLimitRun = {
    windows: Math.max(1, knob('RL_WINDOWS', 3)),
    perEndpoint: knob('RL_PER_ENDPOINT', 120),
    perClient: knob('RL_PER_CLIENT', 30),
    crowd: knob('RL_CROWD', 8),
    pauseMs: knob('RL_PAUSE_MS', 100),
    burstCalls: 0,
    log: (line) => process.stderr.write(line + '\n'),
  };
  const ws = await publicLimitAcrossReplicas(run);
  // The control: the same burst on two replicas without Redis must admit more than the limit, or the
  // suite could not tell shared limits from per-process ones.
  const control = knob('RL_CONTROL', 1)
    ? (
        await publicLimitAcrossReplicas({ ...run, windows: 0, burstCalls: 2 * run.perClient, redisUrl: null })
      )[0]
    : undefined;
  const passed = limitsHeld(run, ws) && (!control || control.admitted > run.perEndpoint);
  const sum = (f: (w: (typeof ws)[number]) => number) => ws.reduce((n, w) => n + f(w), 0);
  const text = report(
    {
      suite: 'Public rate limit across two replicas with Redis',
      passed,
      setup: `Kubernetes mode on the local control plane, a Public endpoint (engine simulator pods), two API replicas (A in-process, B its own \`npm start\` process) on one database sharing Redis (REDIS_URL), TRUST_PROXY so each client is its X-Forwarded-For address; limits ${run.perEndpoint} a minute per endpoint and ${run.perClient} per client. ${run.windows} whole windows: a heavy client sends ${3 * run.perClient} calls at once, then ${run.crowd} clients call every ${run.pauseMs} ms until 3 s before the window ends; calls alternate A, B.`,
      rows: [
        ['windows', ws.length],
        [
          'calls sent / admitted (200) / refused (429)',
          `${sum((w) => w.sent)} / ${sum((w) => w.admitted)} / ${sum((w) => w.refused)}`,
        ],
        ...ws.map((w): [string, string] => [
          `window ${w.window.slice(11, 16)}`,
          `sent ${w.sent}, admitted ${w.admitted} of ${run.perEndpoint} (A ${w.admittedBy[0]}, B ${w.admittedBy[1]}); heavy client ${w.heavyAdmitted} of ${run.perClient}; most for one crowd client ${w.crowdMaxAdmitted}`,
        ]),
        [
          'other answers',
          ws
            .flatMap((w) => w.other)
            .slice(0, 5)
            .join('; ') || 'none',
        ],
        [
          'control: one burst on two replicas without Redis',
          control
            ? `sent ${control.sent}, admitted ${control.admitted} (A ${control.admittedBy[0]}, B ${control.admittedBy[1]}) against a limit of ${run.perEndpoint}; heavy client ${control.heavyAdmitted} of ${run.perClient}`
            : 'not run (CHAOS_RL_CONTROL=0)',
        ],
      ],
    },
    started,
  );
  return { text, passed };
}
