#!/usr/bin/env bash
# The main job: bring up the local fleet (a hub and members, no Docker), then
# run the fleetdb hub against it in the foreground. Ctrl-C stops the hub; the
# fleet stays up for the next run until `make fleet-down`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
hack/fleet.sh up
eval "$(hack/fleet.sh env)"
mkdir -p bin
go build -o bin/fleetdb-hub ./hub/cmd/fleetdb-hub
kubectl="$(hack/toolchain.sh)/kubectl"
cat >&2 <<MSG

fleetdb hub is starting against the local fleet.
In another terminal:

  export KUBECONFIG=$HUB_KUBECONFIG
  alias kubectl=$kubectl
  kubectl get memberclusters
  kubectl create namespace team-a
  kubectl apply -f deploy/samples/database.yaml
  kubectl get databases -A -w
  kubectl wait --for=condition=Ready database/orders -n team-a --timeout=120s

Member kubeconfigs: $MEMBER_KUBECONFIGS
Metrics: http://127.0.0.1:${METRICS_PORT:-8080}/metrics
Stop the hub with Ctrl-C; remove the fleet with: make fleet-down

MSG
exec bin/fleetdb-hub --kubeconfig "$HUB_KUBECONFIG" --dev-logs \
	--metrics-bind-address "127.0.0.1:${METRICS_PORT:-8080}" --health-probe-bind-address "127.0.0.1:${HEALTH_PORT:-8081}" "$@"
