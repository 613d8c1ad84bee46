#!/usr/bin/env bash
# Prepares kind (Kubernetes in containers) for the kind e2e tests and
# deploy/kind/up.sh: built from its Go module (sigs.k8s.io/kind, semver-tagged,
# so `go install` works as is) with the machine's Go toolchain and module
# proxy, cached outside the repository in
#   ${MESHHUB_CACHE:-~/.cache/meshhub}/kind-<version>/bin/kind
# Prints the binary's path. Nothing built here is ever committed.
#
# Usage: e2e/peers/kind.sh              build (or reuse) and print the path
#        MESHHUB_KIND_VERSION=v0.33.0   pin another release
#
# kind's node image cannot be pulled where no container registry is
# reachable: e2e/peers/kind-node.sh builds one.
set -euo pipefail

version="${MESHHUB_KIND_VERSION:-v0.33.0}"
cache="${MESHHUB_CACHE:-$HOME/.cache/meshhub}"
bin="$cache/kind-$version/bin"

log() { echo "kind.sh: $*" >&2; }

if [ -x "$bin/kind" ] && "$bin/kind" version >/dev/null 2>&1; then
  echo "$bin/kind"
  exit 0
fi
command -v go >/dev/null 2>&1 || { log "go is required to build kind"; exit 1; }
start=$SECONDS
mkdir -p "$bin"
log "building kind $version (cold: about 1.5 minutes on 2 cores)"
GOFLAGS=-mod=mod GOBIN="$bin" go install "sigs.k8s.io/kind@$version"
log "kind built in $((SECONDS - start)) s"
echo "$bin/kind"
