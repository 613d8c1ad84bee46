#!/usr/bin/env bash
# Two kind clusters installed with the Helm charts of deploy/charts:
#   meshhub-east: the Istio CRDs, the hub (reading Istio objects from its own
#                 Kubernetes API) and east's sink agent;
#   meshhub-west: the Istio CRDs and west's sink agent (applying to west's
#                 API), which the hub dials across the kind Docker network
#                 (NodePort 30911).
# Then it creates the Bookinfo objects in east and shows them arriving.
#
# The image is the one CI builds and tests: deploy/image/build.sh (buildah
# when installed, else docker) writes target/image/meshhub-image.tar, which
# `kind load image-archive` copies into each cluster's nodes.
#
# NOT exercised by CI: the CI machine has no Docker engine (kind's nodes
# are containers). CI builds the same image, runs the charts' pods from it
# with podman against real kube-apiservers (e2e/tests/it/image.rs), renders
# the charts with real Helm and applies them (e2e/tests/it/helm_charts.rs).
#
# Needs: docker, kind, kubectl, helm, and what deploy/image/build.sh needs
# (the Rust musl target, musl-tools, python3). Run from anywhere;
# ./down.sh removes it all. Plaintext between hub and agents: see
# deploy/README.md for TLS.
set -euo pipefail
cd "$(dirname "$0")/../.."
IMAGE_REPO=meshhub
IMAGE_TAG=dev
NS=meshhub
CRDS=../shared/fixtures/istio/crds/crd-all.gen.yaml

MESHHUB_IMAGE="$IMAGE_REPO:$IMAGE_TAG" deploy/image/build.sh
for c in east west; do
  kind get clusters | grep -qx "meshhub-$c" || kind create cluster --config "deploy/kind/$c.yaml"
  kind load image-archive target/image/meshhub-image.tar --name "meshhub-$c"
  kubectl --context "kind-meshhub-$c" apply --server-side -f "$CRDS"
  kubectl --context "kind-meshhub-$c" create namespace bookinfo --dry-run=client -o yaml \
    | kubectl --context "kind-meshhub-$c" apply -f -
done

image=(--set "image.repository=$IMAGE_REPO" --set "image.tag=$IMAGE_TAG" --set image.pullPolicy=Never)

# west's agent: applies what it receives to west's API, in bookinfo only.
helm --kube-context kind-meshhub-west upgrade --install meshhub-sink-agent deploy/charts/meshhub-sink-agent \
  -n "$NS" --create-namespace "${image[@]}" \
  --set cluster=west --set apply.enabled=true --set 'apply.namespaces={bookinfo}' \
  --set service.type=NodePort --wait
kubectl --context kind-meshhub-west -n "$NS" patch service meshhub-sink-agent --type=json \
  -p '[{"op":"replace","path":"/spec/ports/0/nodePort","value":30911}]'
WEST_IP=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' meshhub-west-control-plane)

# east's agent: stores and re-serves only (east's API is the hub's source).
helm --kube-context kind-meshhub-east upgrade --install meshhub-sink-agent deploy/charts/meshhub-sink-agent \
  -n "$NS" --create-namespace "${image[@]}" --set cluster=east --wait

# The hub, reading east's API, pushing to both agents.
helm --kube-context kind-meshhub-east upgrade --install meshhub deploy/charts/meshhub \
  -n "$NS" "${image[@]}" --wait -f - <<YAML
config:
  sources:
    - name: kubernetes
      kubernetes: {namespaces: [bookinfo]}
  clusters:
    - name: east
      namespaces: [bookinfo]
      agent: {address: "http://meshhub-sink-agent.$NS.svc:9911"}
    - name: west
      namespaces: [bookinfo]
      agent: {address: "http://$WEST_IP:30911"}
YAML

kubectl --context kind-meshhub-east -n bookinfo apply -f examples/bookinfo/

cat <<MSG
Up. Each remote cluster's state as the hub sees it:
  kubectl --context kind-meshhub-east -n $NS exec deploy/meshhub -- meshhubctl status
The Bookinfo objects applied in west by its agent:
  kubectl --context kind-meshhub-west -n bookinfo get virtualservices,destinationrules -L app.kubernetes.io/managed-by
Tear down: deploy/kind/down.sh
MSG
