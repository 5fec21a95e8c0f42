# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this
# Shared settings and helpers for build.sh, up.sh and down.sh. Sourced, not executed.

K8S_VERSION=v1.36.3
K8S_MAJOR=1
K8S_MINOR=36
COLD_BUILD_MINUTES=13

BERTH_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/berth"
# Binaries are keyed by the Kubernetes release; build.sh rebuilds in place when the module changes.
BERTH_K8S_BIN="$BERTH_CACHE/k8s/$K8S_VERSION/bin"
# Cluster state (etcd data, certificates, kubeconfig, logs, pid files). One local cluster per user.
BERTH_CLUSTER_DIR="${BERTH_CLUSTER_DIR:-$BERTH_CACHE/cluster}"
BERTH_KUBECONFIG="$BERTH_CLUSTER_DIR/kubeconfig"

BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
# Started in this order.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

all_binaries_present() {
  local dir=$1 b
  shift
  for b in "${@:-${BINARIES[@]}}"; do
    [[ -x "$dir/$b" ]] || return 1
  done
}

# Where a binary comes from: KUBEBUILDER_ASSETS (envtest's prebuilt etcd, kube-apiserver, kubectl)
# wins for the binaries it holds; everything else comes from the build cache.
bin_path() {
  local name=$1
  if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/$name" ]]; then
    echo "$KUBEBUILDER_ASSETS/$name"
  else
    echo "$BERTH_K8S_BIN/$name"
  fi
}

pid_file() { echo "$BERTH_CLUSTER_DIR/run/$1.pid"; }

# A pid counts as ours only while it is alive AND its command line names our state directory, so a
# stale pid file never makes us signal an unrelated process that reused the pid.
our_pid() {
  local file pid
  file=$(pid_file "$1")
  [[ -f "$file" ]] || return 1
  pid=$(cat "$file")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$BERTH_CLUSTER_DIR" || return 1
  echo "$pid"
}

# Stops every component we started: the clients of the API server together, then the API server,
# then etcd. SIGTERM, then SIGKILL after a grace period; returns once every process is gone.
stop_components() {
  stop_group kwok kube-scheduler kube-controller-manager
  stop_group kube-apiserver
  stop_group etcd
}

stop_group() {
  local name pid deadline pids=()
  for name in "$@"; do
    if pid=$(our_pid "$name"); then
      log "stopping $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$(pid_file "$name")"
  done
  deadline=$((SECONDS + 15))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      log "pid $pid did not stop in 15s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
  done
}

# kubectl for scripts: the one we build (or KUBEBUILDER_ASSETS'), else the one on PATH.
any_kubectl() {
  local k
  k=$(bin_path kubectl)
  if [[ -x "$k" ]]; then
    echo "$k"
  elif command -v kubectl >/dev/null; then
    command -v kubectl
  else
    return 1
  fi
}
