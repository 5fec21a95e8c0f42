#!/usr/bin/env bash
# Lints .github/workflows with actionlint (pinned), installing it with `go install` into the Berth
# cache on first use. Run locally and in CI: bash test/kind/actionlint.sh
set -euo pipefail

version=v1.7.12
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${XDG_CACHE_HOME:-$HOME/.cache}/berth/tools/actionlint-$version"

if [[ ! -x "$bin/actionlint" ]]; then
  export PATH="$PATH:/usr/local/go/bin"
  command -v go >/dev/null || {
    echo "actionlint.sh: go is needed to install actionlint" >&2
    exit 1
  }
  echo "actionlint.sh: installing actionlint $version" >&2
  GOBIN="$bin" GOFLAGS=-mod=mod go install "github.com/rhysd/actionlint/cmd/actionlint@$version"
fi
cd "$repo"
"$bin/actionlint" -no-color
echo "actionlint: .github/workflows OK" >&2
