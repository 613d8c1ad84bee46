#!/usr/bin/env bash
# Deletes the three kind clusters made by up.sh (same provider choice:
# KIND_EXPERIMENTAL_PROVIDER, else docker when its engine answers, else
# podman). The node image e2e/peers/kind-node.sh built stays cached.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${KIND_EXPERIMENTAL_PROVIDER:-}" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    export KIND_EXPERIMENTAL_PROVIDER=docker
  else
    export KIND_EXPERIMENTAL_PROVIDER=podman
    export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/deploy/kind/podman-containers.conf}"
  fi
fi
kind="$(command -v kind || bash e2e/peers/kind.sh)"
for c in primary remote1 remote2; do "$kind" delete cluster --name "meshhub-$c"; done
