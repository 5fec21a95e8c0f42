// `npm run bench [name...]`: runs the named benchmarks (default: all) and prints Markdown for
// BENCHMARKS.md. Every figure is measured in the same run as its baseline.
import { benchAuth } from './auth.ts';
import { benchBilling } from './billing.ts';
import { benchBillingHot } from './billing-hot.ts';
import { benchChronos } from './chronos.ts';
import { benchChronosIdle } from './chronos-idle.ts';
import { benchElastic } from './elastic.ts';
import { benchMetering } from './metering.ts';
import { benchOlympus } from './olympus.ts';
import { benchProxy } from './proxy.ts';
import { benchProxyComponents } from './proxy-components.ts';
import { benchProxyShipped } from './proxy-shipped.ts';
import { benchRouting } from './routing.ts';
import { benchRoutingReplicas } from './routing-replicas.ts';
import { benchWake } from './wake.ts';
import { benchWakeUnderLoad } from './wake-load.ts';

const benches: Record<string, () => Promise<string>> = {
  auth: benchAuth,
  billing: benchBilling,
  'billing-hot': benchBillingHot,
  chronos: benchChronos,
  'chronos-idle': benchChronosIdle,
  elastic: benchElastic,
  metering: benchMetering,
  olympus: benchOlympus,
  proxy: () => benchProxy(),
  'proxy-latency': () => benchProxy(['latency']),
  'proxy-cpu': () => benchProxy(['cpu']),
  'proxy-streams': () => benchProxy(['streams']),
  'proxy-wake': () => benchProxy(['wake']),
  'proxy-shipped': () => benchProxyShipped(),
  'proxy-shipped-core': () => benchProxyShipped(['core']),
  'proxy-shipped-stream': () => benchProxyShipped(['stream']),
  'proxy-large': () => benchProxyShipped(['large']),
  'proxy-components': benchProxyComponents,
  routing: benchRouting,
  'routing-replicas': benchRoutingReplicas,
  wake: benchWake,
  'wake-under-load': benchWakeUnderLoad,
};

const names = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(benches);
for (const name of names) {
  const bench = benches[name];
  if (!bench) {
    console.error(`unknown benchmark ${name}; known: ${Object.keys(benches).join(', ')}`);
    process.exit(2);
  }
  process.stdout.write((await bench()) + '\n\n');
}
