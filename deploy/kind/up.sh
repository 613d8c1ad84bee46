#!/usr/bin/env bash
# Two kind clusters: meshhub-east runs the hub and east's sink agent;
# meshhub-west runs west's sink agent, which the hub dials across the kind
# Docker network (NodePort 30911). The hub serves examples/bookinfo.
#
# NOT exercised by CI: the CI machine has no Docker engine. The process-level
# equivalent that CI does run is e2e/tests/multicluster.rs.
#
# Needs: docker, kind, kubectl. Run from anywhere; ./down.sh removes it all.
set -euo pipefail
cd "$(dirname "$0")/../.."
IMAGE=meshhub:dev
NS=meshhub

docker build -f deploy/Dockerfile -t "$IMAGE" .
for c in east west; do
  kind get clusters | grep -qx "meshhub-$c" || kind create cluster --config "deploy/kind/$c.yaml"
  kind load docker-image "$IMAGE" --name "meshhub-$c"
done

# agent <context> <cluster> <service type>: a sink agent Deployment + Service.
agent() {
  kubectl --context "$1" create namespace "$NS" --dry-run=client -o yaml | kubectl --context "$1" apply -f -
  kubectl --context "$1" -n "$NS" apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: meshhub-agent}
spec:
  replicas: 1          # one agent per data directory
  strategy: {type: Recreate}
  selector: {matchLabels: {app: meshhub-agent}}
  template:
    metadata: {labels: {app: meshhub-agent}}
    spec:
      containers:
        - name: agent
          image: $IMAGE
          imagePullPolicy: Never
          command: [meshhub-sink-agent]
          args: [--cluster, "$2", --data-dir, /var/lib/meshhub-agent,
                 --sink-addr, "0.0.0.0:9911", --grpc-addr, "0.0.0.0:9912", --admin-addr, "0.0.0.0:9913"]
          ports: [{containerPort: 9911}, {containerPort: 9912}, {containerPort: 9913}]
          readinessProbe: {httpGet: {path: /readyz, port: 9913}}
          volumeMounts: [{name: data, mountPath: /var/lib/meshhub-agent}]
      volumes:
        # emptyDir survives container restarts, not pod deletion; use a
        # PersistentVolumeClaim to keep the state across rescheduling.
        - {name: data, emptyDir: {}}
---
apiVersion: v1
kind: Service
metadata: {name: meshhub-agent}
spec:
  type: $3
  selector: {app: meshhub-agent}
  ports:
    - {name: sink, port: 9911, targetPort: 9911$( [ "$3" = NodePort ] && echo ", nodePort: 30911" || true)}
    - {name: mcp, port: 9912, targetPort: 9912}
YAML
}

agent kind-meshhub-west west NodePort
agent kind-meshhub-east east ClusterIP
WEST_IP=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' meshhub-west-control-plane)

# The hub: configuration and objects from ConfigMaps (both watched: an
# update of either is picked up without a restart).
K="kubectl --context kind-meshhub-east -n $NS"
$K create configmap meshhub-objects --from-file=examples/bookinfo/ --dry-run=client -o yaml | $K apply -f -
$K apply -f - <<YAML
apiVersion: v1
kind: ConfigMap
metadata: {name: meshhub-config}
data:
  meshhub.yaml: |
    sources:
      - name: bookinfo
        file: {path: /etc/meshhub/objects}
    clusters:
      - name: east
        namespaces: [bookinfo]
        agent: {address: "http://meshhub-agent.$NS.svc:9911"}
      - name: west
        namespaces: [bookinfo]
        labels: {topology.meshhub.io/west: "true"}
        agent: {address: "http://$WEST_IP:30911"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: meshhub}
spec:
  replicas: 1
  selector: {matchLabels: {app: meshhub}}
  template:
    metadata: {labels: {app: meshhub}}
    spec:
      containers:
        - name: hub
          image: $IMAGE
          imagePullPolicy: Never
          args: [--config, /etc/meshhub/config/meshhub.yaml, --grpc-addr, "0.0.0.0:9901", --admin-addr, "0.0.0.0:9902"]
          ports: [{containerPort: 9901}, {containerPort: 9902}]
          readinessProbe: {httpGet: {path: /readyz, port: 9902}}
          livenessProbe: {httpGet: {path: /healthz, port: 9902}}
          volumeMounts:
            - {name: config, mountPath: /etc/meshhub/config}
            - {name: objects, mountPath: /etc/meshhub/objects}
      volumes:
        - {name: config, configMap: {name: meshhub-config}}
        - {name: objects, configMap: {name: meshhub-objects}}
---
apiVersion: v1
kind: Service
metadata: {name: meshhub}
spec:
  selector: {app: meshhub}
  ports: [{name: mcp, port: 9901}, {name: admin, port: 9902}]
YAML
$K rollout status deploy/meshhub --timeout=180s

cat <<MSG
Up. Watch the status of both remote clusters:
  kubectl --context kind-meshhub-east -n $NS exec deploy/meshhub -- meshhubctl status
What west's consumers get (from west's agent):
  kubectl --context kind-meshhub-west -n $NS exec deploy/meshhub-agent -- \\
    meshhubctl watch --server http://127.0.0.1:9912 --cluster west --once
Tear down: deploy/kind/down.sh
MSG
