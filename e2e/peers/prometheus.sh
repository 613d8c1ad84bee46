#!/usr/bin/env bash
# Prepares the real Prometheus server the rollout's metric-gate tests query:
# Debian's `prometheus` package (the tests start their own server on
# loopback, with their own configuration and storage).
#
# Usage: e2e/peers/prometheus.sh      install (or reuse) and print the binary
set -euo pipefail

log() { echo "prometheus.sh: $*" >&2; }

if ! command -v prometheus >/dev/null 2>&1 && [ ! -x /usr/bin/prometheus ]; then
  log "installing prometheus (Debian)"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq >/dev/null || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=300 prometheus >/dev/null
  # Debian starts the service on install; the tests run their own.
  $sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
  $sudo pkill -x prometheus >/dev/null 2>&1 || true
fi
command -v prometheus 2>/dev/null || echo /usr/bin/prometheus
