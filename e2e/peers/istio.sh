#!/usr/bin/env bash
# Prepares the real Istio programs that meshhub's interoperability tests run
# against, built from Istio's Go sources through the module proxy:
#
#   pilot-discovery (istiod) of a current release    -> MCP-over-xDS consumer
#   galley and mcpc of Istio 1.5                      -> classic MCP source/sink
#
# Usage: e2e/peers/istio.sh istiod       build (or reuse) istiod 1.28, print its path
#        e2e/peers/istio.sh istiod-1.23  the same for istiod 1.23 (pre-1.24 type URLs)
#        e2e/peers/istio.sh istiod-newest the same for the newest istiod the proxy
#                                        serves (Istio master, see the pin below)
#        e2e/peers/istio.sh istio15      build (or reuse) galley, mcpc, mcpsink15; print the bin dir
#        e2e/peers/istio.sh module       download (or reuse) istiod 1.28's Go module,
#                                        print its directory (its CRDs and test
#                                        data are read by tests, never copied)
#        e2e/peers/istio.sh module-newest the same for the newest istiod's module
#                                        (its crd-all.gen.yaml: the newest line
#                                        of the validation parity test)
#        e2e/peers/istio.sh all          the four builds above, print nothing
#
# Binaries are cached outside the repository, in
#   ${MESHHUB_CACHE:-~/.cache/meshhub}/istio-<version>/bin
# and reused when present. Nothing built here is ever committed.
#
# Why pseudo-versions: Istio's tags are not semver ("1.28.3"), so the module
# proxy serves istio.io/istio only at exact pseudo-versions
#   v0.0.0-<commit time UTC, YYYYMMDDhhmmss>-<first 12 hex of the commit>
# computed from the tag's commit. The pins below were computed that way:
#   1.28.3 = commit 4c1f845d839e, 2026-01-14 10:04:34 UTC
#   1.23.2 = commit da0b3f29e9f9, 2024-09-17 19:00:16 UTC
#   1.5.0  = commit c3c353285578, 2020-03-04 11:49:59 UTC
# (1.23.3-1.23.6 and 1.22.4+ are not served by the proxy reachable here.)
# The newest line: Istio's release tags after 1.28.3 are not served, master
# pseudo-versions are. The newest one the proxy serves is its @latest:
#   newest = commit eed52ebb66ad on master, 2026-08-27 12:45:20 UTC
# computed by asking the proxy itself rather than from a tag
# (`go list -m -json istio.io/istio@latest` answers this pseudo-version, built
# from the commit's hash and committer time like the tags' pins above). Its
# go.mod says go 1.26.0 and needs no replace beyond Istio's own. The version
# it reports (`pilot-discovery version`) is "newest".
set -euo pipefail

ISTIOD_TAG="1.28.3"
ISTIOD_VERSION="v0.0.0-20260114100434-4c1f845d839e"
ISTIOD_OLD_TAG="1.23.2"
ISTIOD_OLD_VERSION="v0.0.0-20240917190016-da0b3f29e9f9"
ISTIOD_NEWEST_TAG="newest"
ISTIOD_NEWEST_VERSION="v0.0.0-20260827124520-eed52ebb66ad"
ISTIO15_TAG="1.5.0"
ISTIO15_VERSION="v0.0.0-20200304114959-c3c353285578"
cache="${MESHHUB_CACHE:-$HOME/.cache/meshhub}"

log() { echo "istio.sh: $*" >&2; }

# The checksum database reachable here has no entry for these
# pseudo-versions and for several of their dependencies (404 from the sumdb
# lookup), so the module proxy is trusted as it is for these test peers.
export GOSUMDB=off

need_go() {
  command -v go >/dev/null 2>&1 || { log "go is required to build the Istio peers"; exit 1; }
}

# pilot-discovery of a release (tag, pseudo-version, extra go.mod lines).
# Its go.mod has no local replaces, so a scratch module that requires
# istio.io/istio builds it as is.
build_istiod() {
  local tag="$1" version="$2" extra="${3:-}"
  local dir="$cache/istio-$tag" bin
  bin="$dir/bin"
  if [ -x "$bin/pilot-discovery" ] && "$bin/pilot-discovery" version --short >/dev/null 2>&1; then
    echo "$bin/pilot-discovery"
    return
  fi
  need_go
  local start=$SECONDS work="$dir/module"
  mkdir -p "$work" "$bin"
  log "building pilot-discovery $tag ($version) in $work (cold: about 6 minutes on 2 cores)"
  (
    cd "$work"
    export GOFLAGS=-mod=mod
    local gomod
    gomod="$(go mod download -json "istio.io/istio@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
    [ -f "$gomod" ] || { log "could not download istio.io/istio@$version"; exit 1; }
    {
      printf 'module meshhub.local/istiodpeer\n\ngo 1.22\n\n'
      # Istio's own module-to-module replaces (1.23 pins an old mergo).
      grep -E '^replace [^ ]+ => [^ ]+ v' "$gomod" || true
      if [ -n "$extra" ]; then echo "$extra"; fi
    } >go.mod
    go get "istio.io/istio@$version" >/dev/null
    go build -trimpath \
      -ldflags "-X istio.io/istio/pkg/version.buildVersion=$tag" \
      -o "$bin/pilot-discovery.tmp" istio.io/istio/pilot/cmd/pilot-discovery
  )
  mv "$bin/pilot-discovery.tmp" "$bin/pilot-discovery"
  log "pilot-discovery $tag built in $((SECONDS - start)) s"
  echo "$bin/pilot-discovery"
}

# Galley and mcpc of Istio 1.5, and mcpsink15 (e2e/peers/mcpsink15: Istio
# 1.5's ResourceSink server library behind a small main of ours). Istio 1.5's go.mod replaces a few modules
# with forks (glog, klog, viper, docker engine, go-autorest pins); a scratch
# module must repeat those replaces, read from the module's own go.mod. One
# vanity host of a dependency (vbom.ml) is gone: its code lives on GitHub.
# Go 1.23+ refuses the old `go:linkname` pulls of these dependencies unless
# the check is switched off (-checklinkname=0).
build_istio15() {
  local dir="$cache/istio-$ISTIO15_TAG" bin
  bin="$dir/bin"
  local sink_src sink_sum
  sink_src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/mcpsink15/main.go"
  sink_sum="$(sha256sum "$sink_src" | cut -d' ' -f1)"
  if [ -x "$bin/galley" ] && [ -x "$bin/mcpc" ] && [ -x "$bin/mcpsink15" ] \
    && [ "$(cat "$bin/mcpsink15.sha256" 2>/dev/null)" = "$sink_sum" ]; then
    echo "$bin"
    return
  fi
  need_go
  local start=$SECONDS work="$dir/module"
  mkdir -p "$work" "$bin"
  log "building galley + mcpc $ISTIO15_TAG ($ISTIO15_VERSION) in $work (cold: about 3 minutes on 2 cores)"
  (
    cd "$work"
    export GOFLAGS=-mod=mod
    local gomod
    gomod="$(go mod download -json "istio.io/istio@$ISTIO15_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
    [ -f "$gomod" ] || { log "could not download istio.io/istio@$ISTIO15_VERSION"; exit 1; }
    {
      printf 'module meshhub.local/istio15peer\n\ngo 1.14\n\nrequire istio.io/istio %s\n\n' "$ISTIO15_VERSION"
      grep -E '^replace [^ ]+ => [^ ]+ v' "$gomod"
      echo "replace vbom.ml/util => github.com/fvbommel/util v0.0.0-20160121211510-db5cfe13f5cc"
    } >go.mod
    for prog in galley/cmd/galley galley/tools/mcpc; do
      [ -x "$bin/$(basename "$prog")" ] && continue
      go build -trimpath -ldflags=-checklinkname=0 -o "$bin/$(basename "$prog").tmp" "istio.io/istio/$prog"
      mv "$bin/$(basename "$prog").tmp" "$bin/$(basename "$prog")"
    done
    # meshhub's own ResourceSink peer on Istio 1.5's sink library.
    mkdir -p mcpsink15
    cp "$sink_src" mcpsink15/main.go
    go build -trimpath -ldflags=-checklinkname=0 -o "$bin/mcpsink15.tmp" ./mcpsink15
    mv "$bin/mcpsink15.tmp" "$bin/mcpsink15"
    echo "$sink_sum" >"$bin/mcpsink15.sha256"
  )
  log "galley + mcpc built in $((SECONDS - start)) s"
  echo "$bin"
}

# 1.28.3 needs github.com/envoyproxy/go-control-plane (the root module, only
# to rule out an ambiguous import of its envoy/ submodule) at
# v0.13.5-0.20251013182109-58535202ab44, which the module proxy refuses
# ("not available", 403). The next pseudo-version of the same line, eleven
# days younger, is served; the root module holds none of the packages
# istiod links.
ISTIOD_REPLACES="replace github.com/envoyproxy/go-control-plane => github.com/envoyproxy/go-control-plane v0.13.5-0.20251024222203-75eaa193e329"
# 1.23.2 pins istio.io/client-go at v1.23.1-0.20240906150928-c84358ed0e43,
# which the proxy refuses (403); the v1.23.1 tag of the same release branch
# (built on the same istio.io/api) is served.
ISTIOD_OLD_REPLACES="replace istio.io/client-go => istio.io/client-go v1.23.1"

# The directory of istiod 1.28's module in the Go module cache, downloaded
# when missing: tests read Istio's CRDs and analyzer test data from it, and
# must not depend on an istiod build having happened to put it there (a
# prebuilt MESHHUB_ISTIOD_BIN, or a module cache emptied since).
istio_module() {
  local version="$1"
  need_go
  local dir
  dir="$(GOFLAGS=-mod=mod go mod download -json "istio.io/istio@$version" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -d "$dir" ] || { log "could not download istio.io/istio@$version"; exit 1; }
  echo "$dir"
}

case "${1:-all}" in
  module) istio_module "$ISTIOD_VERSION" ;;
  module-newest) istio_module "$ISTIOD_NEWEST_VERSION" ;;
  istiod) build_istiod "$ISTIOD_TAG" "$ISTIOD_VERSION" "$ISTIOD_REPLACES" ;;
  istiod-1.23) build_istiod "$ISTIOD_OLD_TAG" "$ISTIOD_OLD_VERSION" "$ISTIOD_OLD_REPLACES" ;;
  istiod-newest) build_istiod "$ISTIOD_NEWEST_TAG" "$ISTIOD_NEWEST_VERSION" ;;
  istio15) build_istio15 ;;
  all)
    build_istiod "$ISTIOD_TAG" "$ISTIOD_VERSION" "$ISTIOD_REPLACES" >/dev/null
    build_istiod "$ISTIOD_OLD_TAG" "$ISTIOD_OLD_VERSION" "$ISTIOD_OLD_REPLACES" >/dev/null
    build_istiod "$ISTIOD_NEWEST_TAG" "$ISTIOD_NEWEST_VERSION" >/dev/null
    build_istio15 >/dev/null
    ;;
  *) log "unknown target '$1' (istiod, istiod-1.23, istiod-newest, istio15, module, module-newest, all)"; exit 2 ;;
esac
