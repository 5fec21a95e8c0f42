#!/usr/bin/env bash
# npm run cluster:down — stop the local cluster started by cluster:up and delete its state
# (etcd data, certificates, kubeconfig, logs). Built binaries stay cached. A cluster we did not
# start (KUBECONFIG pointing at kind or a real cluster) is never touched.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

if [[ ! -d "$BERTH_CLUSTER_DIR" ]]; then
  log "no local cluster state in $BERTH_CLUSTER_DIR; nothing to stop"
  exit 0
fi
mkdir -p "$BERTH_CACHE"
exec 9>"$BERTH_CACHE/cluster.lock"
flock 9

stop_components
rm -rf "${BERTH_CLUSTER_DIR:?}"
log "local cluster stopped and its state removed"
if [[ "${KUBECONFIG:-}" == "$BERTH_KUBECONFIG" ]]; then
  log "KUBECONFIG still names the removed kubeconfig; in your shell: unset KUBECONFIG"
fi
