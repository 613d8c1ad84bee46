#!/usr/bin/env bash
# Prepares Helm for the chart tests: built from its Go module (helm.sh/helm,
# semver-tagged, so `go install` works as is) with the machine's Go
# toolchain and module proxy, cached outside the repository in
#   ${MESHHUB_CACHE:-~/.cache/meshhub}/helm-<version>/bin/helm
# Prints the binary's path. Nothing built here is ever committed.
set -euo pipefail

version="${MESHHUB_HELM_VERSION:-v3.22.0}"
cache="${MESHHUB_CACHE:-$HOME/.cache/meshhub}"
bin="$cache/helm-$version/bin"

log() { echo "helm.sh: $*" >&2; }

if [ -x "$bin/helm" ] && "$bin/helm" version --short >/dev/null 2>&1; then
  echo "$bin/helm"
  exit 0
fi
command -v go >/dev/null 2>&1 || { log "go is required to build helm"; exit 1; }
start=$SECONDS
mkdir -p "$bin"
log "building helm $version (cold: about 3 minutes on 2 cores)"
GOFLAGS=-mod=mod GOBIN="$bin" go install "helm.sh/helm/v3/cmd/helm@$version"
log "helm built in $((SECONDS - start)) s"
echo "$bin/helm"
