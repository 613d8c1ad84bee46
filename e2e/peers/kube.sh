#!/usr/bin/env bash
# Prepares the real Kubernetes control plane that meshhub's Kubernetes tests
# run against: kube-apiserver built from the k8s.io/kubernetes Go module with
# the machine's Go toolchain and module proxy, and etcd from Debian.
#
# Usage: e2e/peers/kube.sh            build (or reuse) and print the bin dir
#        e2e/peers/kube.sh CMD...     the same for these commands of
#                                     k8s.io/kubernetes/cmd (kind-node.sh asks
#                                     for kubelet, kubeadm, kubectl and the
#                                     control plane), built by one `go build`
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
#
# The binaries are static (CGO_ENABLED=0, as Kubernetes' own release builds:
# the node image runs the control plane in images `FROM scratch`), stripped,
# and stamped with the version the way hack/lib/version.sh does (kubeadm
# and the kubelet compare versions; unstamped they say v0.0.0-master).
# Every command shares one module, one build cache and one `go build`.
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

# A cached binary is reused if it runs and was built static (a binary from
# before this script built static ones is rebuilt).
usable() {
  [ -x "$1" ] && go version -m "$1" 2>/dev/null | grep -q 'CGO_ENABLED=0'
}

build_cmds() {
  local missing=() cmd
  for cmd in "$@"; do
    usable "$bin/$cmd" || missing+=("$cmd")
  done
  [ "${#missing[@]}" -gt 0 ] || return 0
  command -v go >/dev/null 2>&1 || { log "go is required to build ${missing[*]}"; exit 1; }
  local start=$SECONDS
  local work="$dir/module"
  mkdir -p "$work" "$bin"
  log "building ${missing[*]} $version in $work (cold: about 5 minutes on 2 cores for kube-apiserver alone)"
  cd "$work"
  export GOFLAGS=-mod=mod CGO_ENABLED=0
  # Where the module proxy put k8s.io/kubernetes's own go.mod.
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [ -f "$gomod" ] || { log "could not download k8s.io/kubernetes@$version"; exit 1; }
  local staging="v0.${version#v1.}"
  if ! grep -q "^require k8s.io/kubernetes $version\$" go.mod 2>/dev/null; then
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
  fi
  local pkgs=()
  for cmd in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
  go get "${pkgs[@]/%/@$version}" >/dev/null
  # hack/lib/version.sh's stamps, for both version packages.
  local v=${version#v} ldflags="-s -w" key val
  for kv in "gitVersion=$version" "gitMajor=${v%%.*}" "gitMinor=$(echo "$v" | cut -d. -f2)" \
    gitTreeState=clean "buildDate=1970-01-01T00:00:00Z"; do
    key=${kv%%=*} val=${kv#*=}
    ldflags+=" -X k8s.io/client-go/pkg/version.$key=$val -X k8s.io/component-base/version.$key=$val"
  done
  rm -rf "$bin/.new" && mkdir -p "$bin/.new"
  go build -trimpath -ldflags="$ldflags" -o "$bin/.new/" "${pkgs[@]}"
  for cmd in "${missing[@]}"; do mv "$bin/.new/$cmd" "$bin/$cmd"; done
  rmdir "$bin/.new"
  log "${missing[*]} built in $((SECONDS - start)) s"
}

ensure_etcd
if [ "$#" -eq 0 ]; then set -- kube-apiserver; fi
build_cmds "$@"
echo "$bin"
