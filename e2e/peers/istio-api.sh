#!/usr/bin/env bash
# Prints the directory of Istio's API module (istio.io/api) in the Go module
# cache, downloading it through the module proxy when missing. Tests read
# its CRDs (kubernetes/customresourcedefinitions.gen.yaml) and .proto files
# at test time to check that meshhub's own schema covers every kind, field
# and enum value of that release (proto/tests/it/istio_api.rs); nothing of
# it is ever copied into the repository.
#
# Usage: e2e/peers/istio-api.sh [VERSION]   (default: the newest release
#        meshhub speaks, below; istio.io/api tags are semver, so the proxy
#        serves them by tag)
#
# Its own script, not a target of istio.sh: .ci/run keys the cache of the
# istiod builds on istio.sh's hash, and a download needs no rebuild.
set -euo pipefail

# The newest istio.io/api the module proxy serves here; meshhub's schema
# (proto/schema/) is written to cover it. Keep in step with
# meshhub_testkit::istio_api::VERSION.
ISTIO_API_VERSION="${1:-v1.32.0}"

command -v go >/dev/null 2>&1 || { echo "istio-api.sh: go is required to download istio.io/api" >&2; exit 1; }
# A scratch module: `go mod download` of a module@version works from any
# module, and this one never touches the caller's.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
printf 'module meshhub.local/istioapi\n\ngo 1.22\n' >go.mod
# istio.io/api's tags are in the checksum database, so GOSUMDB stays on.
dir="$(GOFLAGS=-mod=mod go mod download -json "istio.io/api@$ISTIO_API_VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[ -f "$dir/kubernetes/customresourcedefinitions.gen.yaml" ] || {
  echo "istio-api.sh: could not download istio.io/api@$ISTIO_API_VERSION" >&2
  exit 1
}
echo "$dir"
