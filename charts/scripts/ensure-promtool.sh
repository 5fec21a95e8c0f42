#!/usr/bin/env bash
# Builds promtool (Prometheus's rule and config checker) from the Go module proxy once per version
# and prints its path. Prometheus's go.mod has exclude directives, so `go install pkg@version` is
# refused; the build goes through a throwaway module that requires it. Nothing else is downloaded.
set -euo pipefail

PROMETHEUS_MODULE_VERSION="${PROMETHEUS_MODULE_VERSION:-v0.316.0}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/berth/tools/promtool-${PROMETHEUS_MODULE_VERSION}"
bin="$cache/promtool"

if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

go_bin="$(command -v go || true)"
if [[ -z "$go_bin" && -x /usr/local/go/bin/go ]]; then
  go_bin=/usr/local/go/bin/go
fi
if [[ -z "$go_bin" ]]; then
  echo "ensure-promtool: go is required to build promtool (prometheus ${PROMETHEUS_MODULE_VERSION})" >&2
  exit 1
fi

mkdir -p "$cache"
# Built in a temporary module and moved into place: a cut-off build never leaves a half binary.
tmp="$(mktemp -d "$cache/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "ensure-promtool: building promtool from prometheus ${PROMETHEUS_MODULE_VERSION} (one-off, several minutes)" >&2
(
  cd "$tmp"
  printf 'module promtoolbuild\n\ngo 1.26\n' > go.mod
  export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
  "$go_bin" get "github.com/prometheus/prometheus/cmd/promtool@${PROMETHEUS_MODULE_VERSION}" >&2
  "$go_bin" build -trimpath -ldflags "-s -w" -o promtool github.com/prometheus/prometheus/cmd/promtool >&2
)
mv "$tmp/promtool" "$bin"
echo "$bin"
