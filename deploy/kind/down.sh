#!/usr/bin/env bash
# Deletes the two kind clusters made by up.sh. NOT exercised by CI.
set -euo pipefail
for c in east west; do kind delete cluster --name "meshhub-$c"; done
