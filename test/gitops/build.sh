#!/usr/bin/env bash
# Builds the GitOps status tools (cmd/kstatus, cmd/argocd-health) from the Go module proxy in ONE
# `go build`, into ${XDG_CACHE_HOME:-~/.cache}/berth/tools/gitops-<hash of the module and sources>,
# and prints that directory. A later run with the same sources is a no-op; a changed module builds
# into a new directory, so a binary built from old sources is never reused.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
go_bin="$(command -v go || true)"
if [[ -z "$go_bin" && -x /usr/local/go/bin/go ]]; then
  go_bin=/usr/local/go/bin/go
fi
if [[ -z "$go_bin" ]]; then
  echo "gitops/build.sh: go is required (1.26, modules from the Go module proxy)" >&2
  exit 1
fi

stamp="$(cd "$here" && cat go.mod go.sum cmd/*/*.go | sha256sum | cut -c1-16)"
out="${XDG_CACHE_HOME:-$HOME/.cache}/berth/tools/gitops-$stamp"
tools=(kstatus argocd-health)

complete=true
for t in "${tools[@]}"; do [[ -x "$out/$t" ]] || complete=false; done
if $complete; then
  echo "$out"
  exit 0
fi

mkdir -p "$out"
# Build into a temporary directory and move into place: a cut-off build never leaves a
# half-written binary that later runs would trust.
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "gitops/build.sh: building ${tools[*]} (one-off: 1-3 minutes with an empty Go cache on 2 cores)" >&2
start=$(date +%s)
(
  cd "$here"
  GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0 \
    "$go_bin" build -trimpath -ldflags='-s -w' -o "$tmp/" ./cmd/...
)
for t in "${tools[@]}"; do mv -f "$tmp/$t" "$out/$t"; done
echo "gitops/build.sh: built in $(($(date +%s) - start))s" >&2
echo "$out"
