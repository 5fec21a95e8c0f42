#!/usr/bin/env bash
# Prints the path of the Gateway API Inference Extension's InferencePool CRD, from its Go module
# (the version pinned here; the module proxy refuses @latest and version lists). The module lands
# in Go's module cache, so later runs on the same machine read it from disk.
set -euo pipefail
VERSION=v1.5.0
MODULE=sigs.k8s.io/gateway-api-inference-extension
go_bin="$(command -v go || echo /usr/local/go/bin/go)"
dir=$(GOTOOLCHAIN=local GOFLAGS=-mod=mod "$go_bin" mod download -json "$MODULE@$VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
crd="$dir/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"
[ -f "$crd" ] || { echo "no InferencePool CRD in $MODULE@$VERSION ($crd)" >&2; exit 1; }
echo "$crd"
