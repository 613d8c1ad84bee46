#!/usr/bin/env bash
# Prepares grpcurl for the reflection tests: built from its Go module
# (github.com/fullstorydev/grpcurl, semver-tagged, so `go install` works as
# is) with the machine's Go toolchain and module proxy, cached outside the
# repository in
#   ${MESHHUB_CACHE:-~/.cache/meshhub}/grpcurl-<version>/bin/grpcurl
# Prints the binary's path. Nothing built here is ever committed.
set -euo pipefail

version="${MESHHUB_GRPCURL_VERSION:-v1.9.3}"
cache="${MESHHUB_CACHE:-$HOME/.cache/meshhub}"
bin="$cache/grpcurl-$version/bin"

log() { echo "grpcurl.sh: $*" >&2; }

if [ -x "$bin/grpcurl" ] && "$bin/grpcurl" -version >/dev/null 2>&1; then
  echo "$bin/grpcurl"
  exit 0
fi
command -v go >/dev/null 2>&1 || { log "go is required to build grpcurl"; exit 1; }
start=$SECONDS
mkdir -p "$bin"
log "building grpcurl $version (cold: about 2 minutes on 2 cores)"
GOFLAGS=-mod=mod GOBIN="$bin" go install "github.com/fullstorydev/grpcurl/cmd/grpcurl@$version"
log "grpcurl built in $((SECONDS - start)) s"
echo "$bin/grpcurl"
