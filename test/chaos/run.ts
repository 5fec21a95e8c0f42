// `npm run chaos -- <suite...>`: fault suites that print figures (Markdown) for docs/reliability.md.
// Each is bounded in time; knobs are CHAOS_* environment variables (see docs/reliability.md). Exit 1
// when a suite's guarantees did not hold.
import { chronosKill } from './chronos-kill.ts';
import { fuzzRoutes } from './fuzz.ts';
import { operatorKill } from './operator-kill.ts';
import { pgOutage } from './pg-outage.ts';
import { pgStop } from './pg-stop.ts';
import { publicRateLimit } from './public-rate-limit.ts';
import { replicaKill } from './replica-kill.ts';
import { revocationAcrossReplicas } from './revocation.ts';
import { sleepWake } from './sleep-wake.ts';
import { slowClients } from './slow-clients.ts';
import { soak } from './soak.ts';
import { watchGone } from './watch-gone.ts';

const suites: Record<string, () => Promise<{ text: string; passed: boolean }>> = {
  'pg-outage': pgOutage,
  'pg-stop': pgStop,
  'public-rate-limit': publicRateLimit,
  revocation: revocationAcrossReplicas,
  'sleep-wake': sleepWake,
  fuzz: fuzzRoutes,
  'slow-clients': slowClients,
  'operator-kill': operatorKill,
  'watch-410': watchGone,
  'replica-kill': replicaKill,
  soak,
  'chronos-kill': chronosKill,
};

const names = process.argv.slice(2);
if (!names.length || names.some((n) => !suites[n])) {
  console.error(`usage: npm run chaos -- <suite...>; suites: ${Object.keys(suites).join(', ')}`);
  process.exit(2);
}
let failed = false;
for (const name of names) {
  const { text, passed } = await suites[name]!();
  process.stdout.write(text + '\n\n');
  failed ||= !passed;
}
process.exit(failed ? 1 : 0);
