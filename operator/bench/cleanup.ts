// Removes what an interrupted operator bench left: drops the finalizers of the endpoints in the given
// namespaces, deletes the namespaces, and deletes the bench's kwok nodes.
// Usage: KUBECONFIG=… node --import tsx operator/bench/cleanup.ts NAMESPACE...
import { kubectl, kubectlOk } from '@berth/test/cluster/env';
import { Cluster } from '@berth/test/support/operator';
import { reuseConnections } from '@berth/operator';
import { releaseAll } from './lib.ts';

for (const ns of process.argv.slice(2)) {
  const k = new Cluster(ns);
  reuseConnections(k.kc);
  await releaseAll(k);
  await kubectlOk(['delete', 'namespace', ns, '--wait=false', '--ignore-not-found']);
}
await kubectl(['delete', 'node', '-l', 'berth.dev/bench-node=true', '--wait=false']);
