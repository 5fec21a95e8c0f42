#!/usr/bin/env bash
# npm run cluster:up — start the local Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler) with kwok faking GPU nodes and running pods.
# See README.md. The LAST line of stdout is always `export KUBECONFIG=<path>`, so
#   eval "$(npm run -s cluster:up | tail -n 1)"
# works. Everything else goes to stderr.
#
# Idempotent: if our cluster is already up it is reused. A KUBECONFIG that points elsewhere and is
# reachable (kind, a real GPU cluster) is used as is and nothing is started.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

reachable() { # kubeconfig (a KUBECONFIG value: may list several files)
  local k
  k=$(any_kubectl) || return 1
  KUBECONFIG="$1" "$k" --request-timeout=5s get --raw /readyz >/dev/null 2>&1
}

# 1. Honour a cluster the user already has.
if [[ -n "${KUBECONFIG:-}" && "$KUBECONFIG" != "$BERTH_KUBECONFIG" ]]; then
  if ! any_kubectl >/dev/null; then
    log "no kubectl yet; building the binaries first"
    bash "$here/build.sh" kubectl >/dev/null
  fi
  if reachable "$KUBECONFIG"; then
    log "KUBECONFIG=$KUBECONFIG is set and reachable: using that cluster as is, starting nothing"
    echo "export KUBECONFIG=$KUBECONFIG"
    exit 0
  fi
  die "KUBECONFIG=$KUBECONFIG is set but its cluster does not answer; unset KUBECONFIG to start the local cluster"
fi

mkdir -p "$BERTH_CACHE" "$BERTH_CLUSTER_DIR"
# One cluster:up at a time (vitest's globalSetup and a shell may race).
exec 9>"$BERTH_CACHE/cluster.lock"
flock 9

# 2. Reuse our own cluster when every component is alive and the API server is ready.
all_running() {
  local c
  for c in "${COMPONENTS[@]}"; do our_pid "$c" >/dev/null || return 1; done
  [[ -f "$BERTH_KUBECONFIG" ]] && reachable "$BERTH_KUBECONFIG"
}
# A cluster started from other scripts or kwok configuration (an older checkout) is not reused:
# its fake nodes and stages would not be the ones the tests expect.
# The controller-manager's feature gates are part of it (the operator bench compares Kubernetes 1.36's
# defaults with StaleControllerConsistencyReplicaSet=false).
kcm_gates="${BERTH_CLUSTER_KCM_FEATURE_GATES:-}"
fingerprint=$( (cat "$here"/up.sh "$here"/lib.sh "$here"/kwok/*.yaml && echo "$kcm_gates") | sha256sum | cut -c1-16)
if all_running; then
  if [[ "$(cat "$BERTH_CLUSTER_DIR/config.sha" 2>/dev/null)" == "$fingerprint" ]]; then
    log "local cluster already running; reusing it"
    echo "export KUBECONFIG=$BERTH_KUBECONFIG"
    exit 0
  fi
  log "local cluster running with another configuration; restarting it"
fi

# 3. Binaries: KUBEBUILDER_ASSETS provides some, the rest are built (or already cached).
need=()
for b in "${BINARIES[@]}"; do
  if [[ "$(bin_path "$b")" == "$BERTH_K8S_BIN/$b" ]]; then
    need+=("$b")
  else
    log "using $b from KUBEBUILDER_ASSETS ($KUBEBUILDER_ASSETS)"
  fi
done
((${#need[@]} == 0)) || bash "$here/build.sh" "${need[@]}" >/dev/null
for b in "${BINARIES[@]}"; do [[ -x "$(bin_path "$b")" ]] || die "missing binary $(bin_path "$b")"; done
kubectl_bin=$(bin_path kubectl)

fail() {
  log "ERROR: $*"
  log "last lines of the component logs ($BERTH_CLUSTER_DIR/logs):"
  tail -n 15 "$BERTH_CLUSTER_DIR"/logs/*.log >&2 2>/dev/null || true
  stop_components
  exit 1
}

# Interrupted half-way (Ctrl-C, a killed CI step): take down what was started.
trap 'fail "interrupted"' INT TERM

# 4. Clear whatever a killed previous run left behind (its processes, pid files, data).
started_at=$SECONDS
stop_components
rm -rf "${BERTH_CLUSTER_DIR:?}"/{etcd,pki,run,logs,kubeconfig,admin.kubeconfig,ports.env,config.sha}
mkdir -p "$BERTH_CLUSTER_DIR"/{pki,run,logs}

# 5. Free loopback ports, chosen now so a port held by something else never blocks us.
read -r etcd_port etcd_peer_port api_port kcm_port sched_port kwok_port < <(
  node -e '
    const net = require("node:net");
    const servers = Array.from({ length: 6 }, () => net.createServer());
    Promise.all(servers.map((s) => new Promise((r) => s.listen(0, "127.0.0.1", () => r(s.address().port)))))
      .then((ports) => { console.log(ports.join(" ")); servers.forEach((s) => s.close()); });
  '
)
cat >"$BERTH_CLUSTER_DIR/ports.env" <<EOF
ETCD_PORT=$etcd_port
API_PORT=$api_port
EOF

# 6. Certificates (ECDSA P-256: quick to generate): a CA, the API server's serving cert, an admin client cert (system:masters) that
# every component and the tests use, and the service-account signing key.
pki="$BERTH_CLUSTER_DIR/pki"
(
  cd "$pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt -days 3650 \
    -subj "/CN=berth-local-ca" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout apiserver.key -out apiserver.csr \
    -subj "/CN=kube-apiserver" 2>/dev/null
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt \
    -days 3650 -extfile <(printf '%s\n' \
      "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1" \
      "extendedKeyUsage=serverAuth") 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout admin.key -out admin.csr \
    -subj "/O=system:masters/CN=berth-admin" 2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt \
    -days 3650 -extfile <(echo "extendedKeyUsage=clientAuth") 2>/dev/null
  # The aggregation layer's client identity; giving it also stops the controller-manager and
  # scheduler from logging a missing requestheader CA every few seconds.
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout front-proxy-client.key -out front-proxy-client.csr \
    -subj "/CN=front-proxy-client" 2>/dev/null
  openssl x509 -req -in front-proxy-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
    -out front-proxy-client.crt -days 3650 -extfile <(echo "extendedKeyUsage=clientAuth") 2>/dev/null
  openssl ecparam -name prime256v1 -genkey -noout -out sa.key 2>/dev/null
  openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
)

# The components' kubeconfig; the exported copy ($BERTH_KUBECONFIG) appears only once all is ready.
kubeconfig="$BERTH_CLUSTER_DIR/admin.kubeconfig"
"$kubectl_bin" config --kubeconfig "$kubeconfig" set-cluster berth-local \
  --server "https://127.0.0.1:$api_port" --certificate-authority "$pki/ca.crt" --embed-certs >/dev/null
"$kubectl_bin" config --kubeconfig "$kubeconfig" set-credentials berth-admin \
  --client-certificate "$pki/admin.crt" --client-key "$pki/admin.key" --embed-certs >/dev/null
"$kubectl_bin" config --kubeconfig "$kubeconfig" set-context berth-local \
  --cluster berth-local --user berth-admin --namespace default >/dev/null
"$kubectl_bin" config --kubeconfig "$kubeconfig" use-context berth-local >/dev/null
chmod 600 "$kubeconfig"

# Runs a component in its own session (it outlives npm and this shell) and records its pid.
start() { # name args...
  local name=$1
  shift
  log "starting $name"
  # 9>&- : the component must not inherit (and so hold forever) the cluster:up lock.
  setsid "$(bin_path "$name")" "$@" >"$BERTH_CLUSTER_DIR/logs/$name.log" 2>&1 </dev/null 9>&- &
  echo $! >"$(pid_file "$name")"
}

wait_for() { # description timeout_s command...
  local what=$1 timeout=$2
  shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "$what not ready after ${timeout}s"
    local c
    for c in "${COMPONENTS[@]}"; do
      if [[ -f "$(pid_file "$c")" ]] && ! kill -0 "$(cat "$(pid_file "$c")")" 2>/dev/null; then
        fail "$c exited (see $BERTH_CLUSTER_DIR/logs/$c.log)"
      fi
    done
    sleep 0.3
  done
}

k() { "$kubectl_bin" --kubeconfig "$kubeconfig" "$@"; }

# 7. The control plane. Every address is loopback.
start etcd \
  --name=berth --data-dir="$BERTH_CLUSTER_DIR/etcd" \
  --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
  --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" \
  --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster="berth=http://127.0.0.1:$etcd_peer_port" \
  --unsafe-no-fsync --auto-compaction-retention=1 --quota-backend-bytes=$((2 * 1024 * 1024 * 1024)) \
  --log-level=warn
wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"

# Short not-ready/unreachable tolerations (default 300s) so node loss evicts pods within seconds.
start kube-apiserver \
  --etcd-servers="http://127.0.0.1:$etcd_port" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
  --client-ca-file="$pki/ca.crt" \
  --requestheader-client-ca-file="$pki/ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$pki/front-proxy-client.crt" --proxy-client-key-file="$pki/front-proxy-client.key" \
  --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range=10.96.0.0/16 \
  --authorization-mode=RBAC --allow-privileged=true \
  --default-not-ready-toleration-seconds=30 --default-unreachable-toleration-seconds=30 \
  --endpoint-reconciler-type=none --v=1
curl_api() { curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "https://127.0.0.1:$api_port$1"; }
wait_for kube-apiserver 90 curl_api /readyz

start kube-controller-manager \
  --kubeconfig="$kubeconfig" --authentication-kubeconfig="$kubeconfig" --authorization-kubeconfig="$kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$kcm_port" --leader-elect=false \
  --root-ca-file="$pki/ca.crt" --service-account-private-key-file="$pki/sa.key" \
  --service-cluster-ip-range=10.96.0.0/16 \
  --node-monitor-period=2s --node-monitor-grace-period=20s \
  --kube-api-qps=200 --kube-api-burst=400 --v=1 ${kcm_gates:+"--feature-gates=$kcm_gates"}
start kube-scheduler \
  --kubeconfig="$kubeconfig" --authentication-kubeconfig="$kubeconfig" --authorization-kubeconfig="$kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$sched_port" --leader-elect=false \
  --kube-api-qps=200 --kube-api-burst=400 --v=1
start kwok \
  --kubeconfig="$kubeconfig" --config="$here/kwok/stages.yaml" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-ip=127.15.0.254 --cidr=127.16.0.0/24 --node-lease-duration-seconds=40 \
  --server-address="127.0.0.1:$kwok_port"

# 8. Fake nodes, then wait until pods can actually be created and run.
k apply -f "$here/kwok/nodes.yaml" >/dev/null || fail "could not create the fake nodes"
wait_for "fake nodes" 60 k wait --for=condition=Ready node --all --timeout=2s
wait_for "default service account" 60 k get serviceaccount default -n default
wait_for kube-controller-manager 60 curl -sfk "https://127.0.0.1:$kcm_port/healthz"
wait_for kube-scheduler 60 curl -sfk "https://127.0.0.1:$sched_port/healthz"

nodes=$(k get nodes --no-headers | wc -l)
cp "$kubeconfig" "$BERTH_KUBECONFIG.tmp" && mv -f "$BERTH_KUBECONFIG.tmp" "$BERTH_KUBECONFIG"
echo "$fingerprint" >"$BERTH_CLUSTER_DIR/config.sha"
log "cluster up in $((SECONDS - started_at))s: Kubernetes $K8S_VERSION, $nodes nodes, logs in $BERTH_CLUSTER_DIR/logs"
log "stop it with: npm run cluster:down"
echo "export KUBECONFIG=$BERTH_KUBECONFIG"
