#!/usr/bin/env bash
# End-to-end suite on a kind cluster, for machines with a Docker engine (and in GitHub Actions:
# .github/workflows/e2e-kind.yml). Creates a kind cluster, installs kwok in it with the same fake
# GPU nodes and pod Stages as the local cluster (test/cluster/kwok), then runs `npm test` with
# KUBECONFIG pointing at kind — test/cluster/global-setup.ts then uses that cluster as is.
#
# Needs: docker, kind, kubectl, Node 24 with `npm ci` done, PostgreSQL on 127.0.0.1:5432 (trust).
# Env: KIND_CLUSTER (default berth-e2e), KIND_NODE_IMAGE (default: kind's own), KWOK_VERSION
#      (default v0.8.0), KEEP_CLUSTER=1 to leave the cluster running afterwards.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cluster="${KIND_CLUSTER:-berth-e2e}"
kwok_version="${KWOK_VERSION:-v0.8.0}"
kubeconfig="${TMPDIR:-/tmp}/kind-$cluster.kubeconfig"

log() { printf '[kind-e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
for tool in docker kind kubectl npm; do
  command -v "$tool" >/dev/null || {
    log "ERROR: $tool is not on PATH"
    exit 1
  }
done

cleanup() {
  local status=$?
  if ((status != 0)) && [[ -f "$kubeconfig" ]]; then
    log "failed (exit $status); cluster state:"
    kubectl --kubeconfig "$kubeconfig" get nodes,pods -A -o wide >&2 || true
    kubectl --kubeconfig "$kubeconfig" -n kube-system logs deployment/kwok-controller --tail=50 >&2 || true
  fi
  if [[ "${KEEP_CLUSTER:-}" == 1 ]]; then
    log "leaving kind cluster $cluster running (KUBECONFIG=$kubeconfig)"
  else
    kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

if ! kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  log "creating kind cluster $cluster"
  kind create cluster --name "$cluster" --kubeconfig "$kubeconfig" --wait 120s \
    ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
else
  kind get kubeconfig --name "$cluster" >"$kubeconfig"
fi
export KUBECONFIG="$kubeconfig"

log "installing kwok $kwok_version"
kubectl apply -f "https://github.com/kubernetes-sigs/kwok/releases/download/$kwok_version/kwok.yaml"
kubectl -n kube-system rollout status deployment/kwok-controller --timeout=180s
# kwok runs Stages from Stage objects here (the release config enables the Stage CRD); ours replace
# its defaults so pods behave exactly as on the local cluster.
kubectl wait --for=condition=Established crd/stages.kwok.x-k8s.io --timeout=60s
kubectl apply -f "$repo/test/cluster/kwok/stages.yaml"

# The same fake nodes, minus their loopback podCIDRs: kind's controller-manager allocates pod CIDRs
# from its own cluster range and would reject ranges outside it.
log "adding fake GPU nodes"
grep -vE 'podCIDR|^    - 127\.16\.' "$repo/test/cluster/kwok/nodes.yaml" | kubectl apply -f -
kubectl wait --for=condition=Ready node -l type=kwok --timeout=120s
kubectl get nodes -L berth.dev/gpu-type

# Keep test pods off kind's real node (its kubelet would try to pull their images); kwok itself
# and CoreDNS are already running there and stay.
kubectl taint node -l 'type!=kwok' berth.dev/real-node=true:NoSchedule --overwrite

# The local cluster's default ServiceAccount is ready before tests run; wait for kind's too.
until kubectl -n default get serviceaccount default >/dev/null 2>&1; do sleep 1; done

log "running npm test against kind"
cd "$repo"
npm test
