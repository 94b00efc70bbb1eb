#!/usr/bin/env bash
# The main job: bring up the local fleet (a hub and members, no Docker), then
# run the fleetdb hub against it in the foreground. Ctrl-C stops the hub; the
# fleet stays up for the next run until `make fleet-down`.
#
# TRACING=1 (`make run TRACING=1`) also starts Jaeger (hack/jaeger.sh, in-memory,
# test/tools/jaeger/config.yaml, logs in .cache/fleet/jaeger.log) with its web
# UI on http://127.0.0.1:16686 and sends the hub's traces to it over OTLP/HTTP;
# Jaeger stops with the hub. JAEGER_UI_ASSETS=<folder> serves another build of
# the UI; when there is none, Jaeger serves a placeholder page at / (tracing and
# the query API work the same) and a warning says so.
#
# FLEET_NODES=real (`make run NODES=real`, root only) gives the members nodes
# that run real pods and the real CloudNativePG operator (hack/fleet.sh,
# docs/realnodes.md).
#
# HUB_REPLICAS=2 (`make run HUB_REPLICAS=2`) runs that many hub processes with
# leader election: one acts, the others stand by and take over when it stops
# (kill -9 one to watch). Replica i listens on METRICS_PORT+2i (default 8080)
# and HEALTH_PORT+2i (default 8081) and logs to .cache/fleet/hub-<i>.log; the
# Lease fleetdb-hub.fleetdb.io in fleetdb-system names the leader. Ctrl-C
# stops them all. Every replica runs as the hub's own identity (deploy/rbac,
# the token in hub-identity.kubeconfig that hack/fleet.sh writes), never admin.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
hack/fleet.sh up
eval "$(hack/fleet.sh env)"
replicas=${HUB_REPLICAS:-1}
case "$replicas" in
'' | *[!0-9]* | 0) echo "run: HUB_REPLICAS=$replicas: want a number from 1" >&2; exit 2 ;;
esac
fleet_dir=${FLEET_DIR:-$root/.cache/fleet}
mkdir -p bin
go build -o bin/fleetdb-hub ./cmd/fleetdb-hub
kubectl="$(hack/toolchain.sh)/kubectl"
tracing_msg=""
if [ "${TRACING:-}" = 1 ]; then
	jaeger=$(hack/jaeger.sh)
	jaeger_log="${FLEET_DIR:-$root/.cache/fleet}/jaeger.log"
	ui_assets=${JAEGER_UI_ASSETS:-}
	if [ -n "$ui_assets" ] && [ ! -f "$ui_assets/index.html" ]; then
		echo "run: WARNING: JAEGER_UI_ASSETS=$ui_assets has no index.html, using the pinned Jaeger UI" >&2
		ui_assets=""
	fi
	if [ -z "$ui_assets" ] && ! ui_assets=$(hack/jaeger.sh ui); then
		ui_assets=""
		echo "run: WARNING: no Jaeger web UI (see above): http://127.0.0.1:16686/ is a placeholder page; tracing and the query API work" >&2
	fi
	JAEGER_UI_ASSETS="$ui_assets" "$jaeger" --config "$root/test/tools/jaeger/config.yaml" >"$jaeger_log" 2>&1 &
	jaeger_pid=$!
	trap 'kill "$jaeger_pid" 2>/dev/null || true; wait "$jaeger_pid" 2>/dev/null || true' EXIT
	for _ in $(seq 1 60); do
		curl -fsS -o /dev/null http://127.0.0.1:16686/api/services 2>/dev/null && break
		kill -0 "$jaeger_pid" 2>/dev/null || { tail -20 "$jaeger_log" >&2; echo "run: Jaeger exited, see $jaeger_log" >&2; exit 1; }
		sleep 0.5
	done
	export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf
	ui_msg="Jaeger UI at http://127.0.0.1:16686/search?service=fleetdb-hub"
	[ -n "$ui_assets" ] || ui_msg="Jaeger at http://127.0.0.1:16686 (no web UI, a placeholder page)"
	tracing_msg="Traces: $ui_msg (logs: $jaeger_log);
its query API lists the hub's traces too:
  curl 'http://127.0.0.1:16686/api/traces?service=fleetdb-hub&limit=5'
"
fi
nodes_msg=""
if [ "${FLEET_NODES:-}" = real ]; then
	nodes_msg="Real nodes (FLEET_NODES=real): the members run real pods and the real CloudNativePG operator;
the sample's PostgreSQL 17 has no image here: set version \"$(cat "$(hack/realnode-images.sh)/postgresql-version")\"
(Debian's), as docs/realnodes.md shows.
"
fi
replica_msg=""
if [ "$replicas" -gt 1 ]; then
	replica_msg=", logs in $fleet_dir/hub-<i>.log"
fi
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
Metrics: http://127.0.0.1:${METRICS_PORT:-8080}/metrics (replica i: port +2i)
Hub replicas: $replicas, as the ServiceAccount fleetdb-hub ($HUB_IDENTITY_KUBECONFIG)${replica_msg}
The acting one: kubectl -n fleetdb-system get lease fleetdb-hub.fleetdb.io
${tracing_msg}${nodes_msg}Stop the hub(s) with Ctrl-C; remove the fleet with: make fleet-down

MSG
# The hub runs as its own identity (deploy/rbac, HUB_IDENTITY_KUBECONFIG),
# with leader election: one replica acts, the others stand by.
hub_cmd() { # hub_cmd <replica index from 0>: sets hub=(command line)
	local i=$1
	hub=(bin/fleetdb-hub --kubeconfig "$HUB_IDENTITY_KUBECONFIG" --dev-logs --leader-elect --replica-name "hub-$i"
		--metrics-bind-address "127.0.0.1:$((${METRICS_PORT:-8080} + 2 * i))" --metrics-secure=false
		--health-probe-bind-address "127.0.0.1:$((${HEALTH_PORT:-8081} + 2 * i))" "${hub_extra[@]}")
}
hub_extra=("$@")
if [ "$replicas" = 1 ] && [ "${TRACING:-}" != 1 ]; then
	hub_cmd 0
	exec "${hub[@]}"
fi
# With several replicas, or Jaeger to stop afterwards, the hubs run as
# children (which ignore Ctrl-C's SIGINT, as background jobs of scripts do): a
# signal to this script stops every hub with SIGTERM, and the EXIT trap stops
# Jaeger. One replica logs to the terminal; several log to hub-<i>.log files.
pids=()
for i in $(seq 0 $((replicas - 1))); do
	hub_cmd "$i"
	if [ "$replicas" = 1 ]; then
		"${hub[@]}" &
	else
		"${hub[@]}" >"$fleet_dir/hub-$i.log" 2>&1 &
	fi
	pids+=("$!")
done
stop_hubs() { kill "${pids[@]}" 2>/dev/null || true; }
trap stop_hubs INT TERM
status=0
for pid in "${pids[@]}"; do
	while :; do
		rc=0
		wait "$pid" || rc=$?
		kill -0 "$pid" 2>/dev/null || break # else the wait was cut short by a signal
	done
	[ "$rc" = 0 ] || status=$rc
done
exit "$status"
