#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok from the Go
# module in ./k8s, in ONE `go build` so shared packages compile once, into a cache directory outside
# the repository. A stamp (hash of the module files) makes the second run a no-op.
#
# Usage: build.sh [binary...]   (default: all of them; up.sh asks for fewer when KUBEBUILDER_ASSETS
# supplies etcd, kube-apiserver and kubectl). Prints only the bin directory on stdout; progress on stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

mod="$here/k8s"
stamp_want="$( (echo "$K8S_VERSION"; cat "$mod/go.mod" "$mod/go.sum" "$mod"/cmd/*/*.go) | sha256sum | cut -c1-16)"
stamp_file="$BERTH_K8S_BIN/.stamp"

want=("${@:-${BINARIES[@]}}")
if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp_want" ]] && all_binaries_present "$BERTH_K8S_BIN" "${want[@]}"; then
  log "binaries up to date in $BERTH_K8S_BIN"
  echo "$BERTH_K8S_BIN"
  exit 0
fi

export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || die "go is not on PATH (expected /usr/local/go/bin/go)"
export GOFLAGS=-mod=mod GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0

mkdir -p "$BERTH_K8S_BIN"
tmp="$BERTH_K8S_BIN/.build-$$"
rm -rf "$tmp" && mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

# Version stamps so `kubectl version` and the API server report the real release, not v0.0.0-master.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$K8S_MAJOR -X $pkg.gitMinor=$K8S_MINOR"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

declare -A pkg_of=(
  [etcd]=./cmd/etcd
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [kwok]=sigs.k8s.io/kwok/cmd/kwok
)
pkgs=()
for b in "${want[@]}"; do
  [[ -n "${pkg_of[$b]:-}" ]] || die "unknown binary: $b"
  pkgs+=("${pkg_of[$b]}")
done
# A changed module invalidates binaries built from the old one.
if [[ -f "$stamp_file" && "$(cat "$stamp_file")" != "$stamp_want" ]]; then
  for b in "${BINARIES[@]}"; do rm -f "$BERTH_K8S_BIN/$b"; done
fi

log "building Kubernetes $K8S_VERSION components into $BERTH_K8S_BIN (cold: up to ~$COLD_BUILD_MINUTES min on 2 cores; cached after)"
start=$(date +%s)
(
  cd "$mod"
  log "go mod download"
  go mod download
  log "go build ${pkgs[*]}"
  go build -trimpath -ldflags="$ldflags" -o "$tmp/" "${pkgs[@]}"
)
for b in "${want[@]}"; do
  mv -f "$tmp/$b" "$BERTH_K8S_BIN/$b"
done
echo "$stamp_want" >"$stamp_file"
log "built in $(($(date +%s) - start))s"
echo "$BERTH_K8S_BIN"
