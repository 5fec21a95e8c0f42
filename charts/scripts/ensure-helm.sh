#!/usr/bin/env bash
# Builds helm from the Go module proxy once per version and prints its path.
# Nothing else is downloaded: this machine (and CI) only reach the Go proxy.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
# The "-k8s" suffix names the build recipe below (Kubernetes version stamped in); bump it when the
# recipe changes so cached binaries built the old way are not reused.
cache="${XDG_CACHE_HOME:-$HOME/.cache}/berth/tools/helm-${HELM_VERSION}-k8s"
bin="$cache/helm"

if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

go_bin="$(command -v go || true)"
if [[ -z "$go_bin" && -x /usr/local/go/bin/go ]]; then
  go_bin=/usr/local/go/bin/go
fi
if [[ -z "$go_bin" ]]; then
  echo "ensure-helm: go is required to build helm ${HELM_VERSION}" >&2
  exit 1
fi

mkdir -p "$cache"
# Build into a temporary dir and move into place so a cut-off build never
# leaves a half-written binary that later runs would trust.
tmp="$(mktemp -d "$cache/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "ensure-helm: building helm ${HELM_VERSION} (one-off, a few minutes)" >&2

# Helm's Makefile stamps the Kubernetes version of its client-go into the binary; without it,
# `helm template` and `helm lint` assume Kubernetes v1.20 and refuse charts needing newer ones.
gomod="$(GOTOOLCHAIN=local "$go_bin" mod download -json "helm.sh/helm/v3@${HELM_VERSION}" |
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
client_go="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -n 1)"
if [[ -z "$client_go" ]]; then
  echo "ensure-helm: cannot find k8s.io/client-go in $gomod" >&2
  exit 1
fi
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X helm.sh/helm/v3/${pkg}.k8sVersionMajor=1 -X helm.sh/helm/v3/${pkg}.k8sVersionMinor=${client_go}"
done
GOBIN="$tmp" GOTOOLCHAIN=local CGO_ENABLED=0 \
  "$go_bin" install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2
mv "$tmp/helm" "$bin"
echo "$bin"
