#!/usr/bin/env bash
# Three kind clusters installed with the Helm charts of deploy/charts:
#   meshhub-primary: the Istio CRDs and the hub, reading Istio objects from
#                    its own Kubernetes API;
#   meshhub-remote1, meshhub-remote2: the Istio CRDs and a sink agent that
#                    applies what it receives to its cluster's API (in
#                    namespace bookinfo only), which the hub dials across
#                    kind's network (the agent's NodePort 30911).
# Then it creates the Bookinfo objects in the primary and waits until both
# remotes hold them.
#
# Provider: docker (kind's default) or podman (KIND_EXPERIMENTAL_PROVIDER=
# podman; chosen when no Docker engine answers). With podman, podman runs
# with deploy/kind/podman-containers.conf (CONTAINERS_CONF: ulimits within
# this machine's limits, runc) and /lib/modules must exist (kind mounts it).
#
# Node image, MESHHUB_KIND_NODE:
#   kind     kind's own, pulled from its registry (default with docker);
#            clusters from deploy/kind/cluster.yaml
#   meshhub  built here from the package registries by
#            e2e/peers/kind-node.sh (default with podman: for machines that
#            reach no container registry); clusters from
#            deploy/kind/cluster-meshhub-node.yaml (bridge CNI, no kindnetd)
#
# meshhub's image: the one CI builds and tests (deploy/image/build.sh writes
# target/image/meshhub-image.tar, a docker archive), or any docker archive
# of it named by MESHHUB_IMAGE_ARCHIVE (e.g. `podman save --format
# docker-archive -o X meshhub:dev`); `kind load image-archive` copies it into
# each node; the charts use the name inside the archive.
#
# Tools: kind, kubectl and helm from PATH, else the peers e2e/peers builds
# (kind.sh, kube.sh, helm.sh). Run from anywhere; ./down.sh removes the
# clusters. Plaintext between hub and agents: see deploy/README.md for TLS.
set -euo pipefail
cd "$(dirname "$0")/../.."
NS=meshhub
CRDS=../shared/fixtures/istio/crds/crd-all.gen.yaml
REMOTES=(remote1 remote2)
NODEPORT=30911

log() { echo "up.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

provider="${KIND_EXPERIMENTAL_PROVIDER:-}"
if [ -z "$provider" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    provider=docker
  elif command -v podman >/dev/null 2>&1; then
    provider=podman
  else
    die "neither a Docker engine nor podman"
  fi
fi
export KIND_EXPERIMENTAL_PROVIDER="$provider"
if [ "$provider" = podman ]; then
  export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/deploy/kind/podman-containers.conf}"
  [ -d /lib/modules ] || mkdir -p /lib/modules || die "kind mounts /lib/modules: create it"
fi
node="${MESHHUB_KIND_NODE:-}"
[ -n "$node" ] || { [ "$provider" = docker ] && node=kind || node=meshhub; }
case "$node" in
  kind) node_image=() config=deploy/kind/cluster.yaml desc="kind's own" ;;
  meshhub)
    node_image=(--image "$(bash e2e/peers/kind-node.sh)") config=deploy/kind/cluster-meshhub-node.yaml
    desc="${node_image[1]}" ;;
  *) die "MESHHUB_KIND_NODE is kind or meshhub, not $node" ;;
esac
log "provider $provider, node image $desc"

kind="$(command -v kind || bash e2e/peers/kind.sh)"
helm="$(command -v helm || bash e2e/peers/helm.sh)"
if ! command -v kubectl >/dev/null 2>&1; then
  PATH="$(bash e2e/peers/kube.sh kubectl):$PATH"
fi

archive="${MESHHUB_IMAGE_ARCHIVE:-}"
if [ -z "$archive" ]; then
  MESHHUB_IMAGE=meshhub:dev deploy/image/build.sh
  archive=target/image/meshhub-image.tar
fi
[ -f "$archive" ] || die "no image archive $archive"
ref="$(tar -xOf "$archive" manifest.json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["RepoTags"][0])')"
image=(--set "image.repository=${ref%:*}" --set "image.tag=${ref##*:}" --set image.pullPolicy=Never)

start=$SECONDS
# kind creates its network when it finds none and fails when another
# process created it meanwhile: the first cluster goes alone until the
# network exists (or it is done), the others then in parallel.
first=""
for c in primary "${REMOTES[@]}"; do
  if ! "$kind" get clusters 2>/dev/null | grep -qx "meshhub-$c"; then
    "$kind" create cluster --name "meshhub-$c" "${node_image[@]}" --config "$config" --wait 120s >&2 &
    if [ -z "$first" ]; then
      first=$!
      for _ in $(seq 600); do
        "$provider" network inspect kind >/dev/null 2>&1 && break
        kill -0 "$first" 2>/dev/null || break
        sleep 0.2
      done
    fi
  fi
done
wait
for c in primary "${REMOTES[@]}"; do
  "$kind" get clusters 2>/dev/null | grep -qx "meshhub-$c" || die "cluster meshhub-$c was not created"
done
log "clusters up in $((SECONDS - start)) s"
for c in primary "${REMOTES[@]}"; do
  "$kind" load image-archive "$archive" --name "meshhub-$c"
  kubectl --context "kind-meshhub-$c" apply --server-side -f "$CRDS" >/dev/null
  kubectl --context "kind-meshhub-$c" create namespace bookinfo --dry-run=client -o yaml \
    | kubectl --context "kind-meshhub-$c" apply -f - >/dev/null
done

# Each remote's agent: applies what it receives to its API, in bookinfo only.
agents=""
for c in "${REMOTES[@]}"; do
  "$helm" --kube-context "kind-meshhub-$c" upgrade --install meshhub-sink-agent deploy/charts/meshhub-sink-agent \
    -n "$NS" --create-namespace "${image[@]}" \
    --set "cluster=$c" --set apply.enabled=true --set 'apply.namespaces={bookinfo}' \
    --set service.type=NodePort --wait
  kubectl --context "kind-meshhub-$c" -n "$NS" patch service meshhub-sink-agent --type=json \
    -p "[{\"op\":\"replace\",\"path\":\"/spec/ports/0/nodePort\",\"value\":$NODEPORT}]" >/dev/null
  ip="$("$provider" inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "meshhub-$c-control-plane")"
  [ -n "$ip" ] || die "no address for meshhub-$c-control-plane"
  agents+="
    - name: $c
      namespaces: [bookinfo]
      agent: {address: \"http://$ip:$NODEPORT\"}"
done

# The hub, reading the primary's API, pushing to both agents.
"$helm" --kube-context kind-meshhub-primary upgrade --install meshhub deploy/charts/meshhub \
  -n "$NS" --create-namespace "${image[@]}" --wait -f - <<YAML
config:
  sources:
    - name: kubernetes
      kubernetes: {namespaces: [bookinfo]}
  clusters:$agents
YAML

kubectl --context kind-meshhub-primary -n bookinfo apply -f examples/bookinfo/ >/dev/null
# What the hub serves each remote (validation may hold some objects back),
# against what the remote's API holds, applied by its agent.
served() { # cluster → the number of VirtualServices and DestinationRules the hub serves it
  local k n=0
  for k in VirtualService DestinationRule; do
    n=$((n + $(kubectl --context kind-meshhub-primary -n "$NS" exec deploy/meshhub -- \
      meshhubctl get "$k" -n bookinfo --cluster "$1" | tail -n +2 | grep -c . || true)))
  done
  echo "$n"
}
applied() { # cluster → the number its agent applied
  kubectl --context "kind-meshhub-$1" -n bookinfo get virtualservices,destinationrules \
    -l app.kubernetes.io/managed-by=meshhub -o name | grep -c . || true
}
sleep 2
for c in "${REMOTES[@]}"; do
  want=0 have=0
  for _ in $(seq 30); do
    want="$(served "$c")" have="$(applied "$c")"
    [ "$want" -gt 0 ] && [ "$have" -ge "$want" ] && break
    sleep 2
  done
  log "meshhub-$c: its agent applied $have of the $want VirtualServices and DestinationRules the hub serves it"
  kubectl --context "kind-meshhub-$c" -n bookinfo get virtualservices,destinationrules \
    -L app.kubernetes.io/managed-by
  [ "$want" -gt 0 ] && [ "$have" -ge "$want" ] || die "Bookinfo did not arrive in meshhub-$c"
done
kubectl --context kind-meshhub-primary -n "$NS" exec deploy/meshhub -- meshhubctl status || true
log "up in $((SECONDS - start)) s"

cat <<MSG
Each remote cluster's state as the hub sees it:
  kubectl --context kind-meshhub-primary -n $NS exec deploy/meshhub -- meshhubctl status
The Bookinfo objects applied by each remote's agent:
  kubectl --context kind-meshhub-remote1 -n bookinfo get virtualservices,destinationrules -L app.kubernetes.io/managed-by
Tear down: deploy/kind/down.sh
MSG
