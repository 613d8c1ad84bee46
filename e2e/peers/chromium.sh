#!/usr/bin/env bash
# Prepares the headless browser the console tests drive: Debian's
# `chromium` and `chromium-driver` packages (WebDriver). The tests start
# their own chromedriver on loopback and a headless Chromium through it.
#
# Usage: e2e/peers/chromium.sh      install (or reuse) and print chromedriver's path
set -euo pipefail

log() { echo "chromium.sh: $*" >&2; }

driver() { command -v chromedriver 2>/dev/null || { [ -x /usr/bin/chromedriver ] && echo /usr/bin/chromedriver; }; }

if [ -z "$(driver)" ] || ! command -v chromium >/dev/null 2>&1; then
  log "installing chromium and chromium-driver (Debian; about 1-2 minutes)"
  start=$SECONDS
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq >/dev/null || true
  # fonts-dejavu-core: text in the screenshots (Chromium recommends fonts
  # but does not depend on one).
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=300 chromium chromium-driver fonts-dejavu-core >/dev/null
  log "installed in $((SECONDS - start)) s"
fi
bin="$(driver)"
[ -n "$bin" ] || { log "chromedriver is missing after the install"; exit 1; }
echo "$bin"
