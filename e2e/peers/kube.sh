#!/usr/bin/env bash
# Prepares the real Kubernetes control plane that meshhub's Kubernetes tests
# run against: kube-apiserver built from the k8s.io/kubernetes Go module with
# the machine's Go toolchain and module proxy, and etcd from Debian.
#
# Usage: e2e/peers/kube.sh            build (or reuse) and print the bin dir
#        MESHHUB_K8S_VERSION=v1.35.4  pin another release
#
# Binaries are cached outside the repository, in
#   ${MESHHUB_CACHE:-~/.cache/meshhub}/k8s-<version>/bin
# and reused when present. Nothing built here is ever committed.
#
# Why a scratch module: `go install k8s.io/kubernetes/cmd/kube-apiserver@vX`
# fails because k8s.io/kubernetes's go.mod replaces its staging modules with
# ./staging/... paths. A module that requires k8s.io/kubernetes and pins each
# staging module to its published v0.X.Y builds the same code.
set -euo pipefail

version="${MESHHUB_K8S_VERSION:-v1.35.4}"
cache="${MESHHUB_CACHE:-$HOME/.cache/meshhub}"
dir="$cache/k8s-$version"
bin="$dir/bin"

log() { echo "kube.sh: $*" >&2; }

ensure_etcd() {
  if command -v etcd >/dev/null 2>&1; then
    return
  fi
  if [ -x /usr/bin/etcd ]; then
    return
  fi
  log "installing etcd (Debian etcd-server)"
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq >/dev/null || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq etcd-server >/dev/null
  # Debian starts the service on install; the tests run their own.
  $sudo systemctl disable --now etcd >/dev/null 2>&1 || true
  $sudo pkill -x etcd >/dev/null 2>&1 || true
}

build_apiserver() {
  if [ -x "$bin/kube-apiserver" ] && "$bin/kube-apiserver" --version >/dev/null 2>&1; then
    return
  fi
  command -v go >/dev/null 2>&1 || { log "go is required to build kube-apiserver"; exit 1; }
  local start=$SECONDS
  local work="$dir/module"
  mkdir -p "$work" "$bin"
  log "building kube-apiserver $version in $work (cold: about 5 minutes on 2 cores)"
  cd "$work"
  export GOFLAGS=-mod=mod
  # Where the module proxy put k8s.io/kubernetes's own go.mod.
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [ -f "$gomod" ] || { log "could not download k8s.io/kubernetes@$version"; exit 1; }
  local staging="v0.${version#v1.}"
  {
    echo "module meshhub.local/kubepeer"
    echo
    echo "go 1.25"
    echo
    echo "require k8s.io/kubernetes $version"
    echo
    # Every `k8s.io/X => ./staging/src/k8s.io/X` becomes `k8s.io/X => k8s.io/X v0.N.M`.
    grep -E '^[[:space:]]*k8s.io/[^ ]+ => \./staging/' "$gomod" \
      | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
  } >go.mod
  log "$(grep -c '^replace' go.mod) staging modules pinned to $staging"
  go get "k8s.io/kubernetes/cmd/kube-apiserver@$version" >/dev/null
  go build -trimpath -o "$bin/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  mv "$bin/kube-apiserver.tmp" "$bin/kube-apiserver"
  log "kube-apiserver built in $((SECONDS - start)) s"
}

ensure_etcd
build_apiserver
echo "$bin"
