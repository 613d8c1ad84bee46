#!/usr/bin/env bash
# Builds (or reuses) gcp-ads, the go-control-plane ADS server of benchmark
# scenario P5 (bench/peers/gcp-ads/main.go, ours), and prints its path.
#
# Usage: bench/peers/gcp-ads.sh
#
# The program is built in a scratch module under
#   ${MESHHUB_CACHE:-~/.cache/meshhub}/gcp-ads-<pins>/
# from the module proxy at the pinned versions below, and rebuilt when
# main.go changes. Nothing built here is committed.
set -euo pipefail

# go-control-plane's root module (pkg/cache/v3, pkg/server/v3) and its envoy
# API module, and the Istio API module (istio.mcp.v1alpha1.Resource): the
# versions istiod 1.28.3 is built with, so a machine that built the Istio
# peers already holds them.
GCP_VERSION="v0.13.5-0.20251024222203-75eaa193e329"
ENVOY_VERSION="v1.35.1-0.20251009075907-cccc37f025be"
ISTIO_API_VERSION="v1.28.2-0.20251205082437-fde1452f70bc"
cache="${MESHHUB_CACHE:-$HOME/.cache/meshhub}"
dir="$cache/gcp-ads-$GCP_VERSION"
bin="$dir/bin/gcp-ads"

log() { echo "gcp-ads.sh: $*" >&2; }

src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/gcp-ads/main.go"
sum="$(sha256sum "$src" | cut -d' ' -f1)"
if [ -x "$bin" ] && [ "$(cat "$bin.sha256" 2>/dev/null)" = "$sum" ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null 2>&1 || { log "go is required to build gcp-ads"; exit 1; }
# As for the Istio peers: the checksum database reachable here lacks some
# of these pseudo-versions; the module proxy is trusted for a bench peer.
export GOSUMDB=off GOFLAGS=-mod=mod
start=$SECONDS
mkdir -p "$dir/module" "$dir/bin"
log "building gcp-ads in $dir/module"
(
  cd "$dir/module"
  cp "$src" main.go
  cat >go.mod <<MOD
module meshhub.local/gcpads

go 1.23.0

require (
	github.com/envoyproxy/go-control-plane $GCP_VERSION
	github.com/envoyproxy/go-control-plane/envoy $ENVOY_VERSION
	istio.io/api $ISTIO_API_VERSION
)
MOD
  go mod tidy >/dev/null 2>&1 || go mod tidy
  go build -trimpath -o "$bin.tmp" .
)
mv "$bin.tmp" "$bin"
echo "$sum" >"$bin.sha256"
log "gcp-ads built in $((SECONDS - start)) s"
echo "$bin"
