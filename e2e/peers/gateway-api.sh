#!/usr/bin/env bash
# Prints the directory of the Kubernetes Gateway API module
# (sigs.k8s.io/gateway-api) in the Go module cache, downloading it through
# the module proxy when missing. Tests read its CRDs
# (config/crd/{standard,experimental}/*.yaml) at test time and install them
# into real kube-apiservers (e2e/tests/it/gateway_api.rs); nothing of it is
# ever copied into the repository.
#
# Usage: e2e/peers/gateway-api.sh [VERSION]   (default: the release the
#        newest Istio meshhub speaks builds against, below; the module's
#        tags are semver, so the proxy serves them by tag)
set -euo pipefail

# Istio 1.31 builds against v1.6.0 (1.28 against v1.4.0). Keep in step with
# meshhub_e2e::gateway_api::VERSION.
GATEWAY_API_VERSION="${1:-v1.6.0}"

command -v go >/dev/null 2>&1 || { echo "gateway-api.sh: go is required to download sigs.k8s.io/gateway-api" >&2; exit 1; }
# A scratch module: `go mod download` of a module@version works from any
# module, and this one never touches the caller's.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
printf 'module meshhub.local/gatewayapi\n\ngo 1.22\n' >go.mod
# The module's tags are in the checksum database, so GOSUMDB stays on.
dir="$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[ -f "$dir/config/crd/standard/gateway.networking.k8s.io_httproutes.yaml" ] || {
  echo "gateway-api.sh: could not download sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" >&2
  exit 1
}
echo "$dir"
