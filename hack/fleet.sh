#!/usr/bin/env bash
# The local fleet: a hub and member clusters as kwokctl "binary" clusters
# (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok as
# processes, simulated nodes), no Docker needed.
#
#   hack/fleet.sh up       start (or reuse) the fleet, install CRDs, register members
#   hack/fleet.sh down     stop and remove the fleet, leaving no processes or volumes
#   hack/fleet.sh env      print the kubeconfig paths as shell variables
#
# `up` also installs the hub's own identity in the hub cluster (deploy/rbac:
# the ServiceAccount fleetdb-hub, the generated ClusterRole, the leader
# election Role) with a long-lived token for it, and writes
# $FLEET_DIR/hub-identity.kubeconfig (`env` prints it as
# HUB_IDENTITY_KUBECONFIG): hack/run.sh and the e2e suite run the hub with it,
# not with the admin kubeconfig, so a permission deploy/rbac lacks fails there.
#
# Everything lives under FLEET_DIR (default .cache/fleet in the repository,
# git-ignored). FLEET_MEMBERS (default 2) sets the number of members.
# FLEET_AUDIT_POLICY (optional) is an audit policy file given to every
# kube-apiserver the fleet creates (the benchmark counts API writes from the
# audit log, $KWOK_WORKDIR/clusters/<cluster>/logs/audit.log).
# FLEET_KWOKCTL_ARGS (optional) are extra flags for every `kwokctl create
# cluster`, split on spaces (the e2e suite turns kwok's node leases off so a
# member it stops and starts has its simulated nodes managed again at once).
# FLEET_NODES=real (`make run NODES=real`) gives every member a node that runs
# real pods and the real CloudNativePG operator instead of kwok's Stages
# (hack/realnode.sh, docs/realnodes.md; root only): each member is created
# with its own Service range (hack/realnode.sh kwokctl-config), then `up`
# starts its real node, cluster DNS and the operator. `down` removes every
# real node of FLEET_PREFIX whatever FLEET_NODES says (hack/realnode.sh
# down-all), before the clusters.
# FLEET_JOIN_TIMEOUT (default 5m) is how long `kubectl fleetdb join` waits for
# a member's kube-controller-manager to issue the hub agent's token: on a
# loaded machine with many members (the scale bench) 2m was not always enough.
#
# Every member gets CloudNativePG's CRDs (the version pinned in
# test/tools/cnpg/go.mod, from the module cache) and kwok Stages that play the
# CloudNativePG operator (hack/kwok/cnpg-stages.yaml): a Cluster reports
# healthy with all its instances ready. Members run kwok with
# --enable-crds=Stage, so the Stages are applied after the CRDs (a Stage
# naming a kind the API server does not serve stops kwok), together with
# kwok's default node and pod stages (Stage objects replace the defaults).
# A member created by an earlier version of this script, without the Stage
# CRD, is recreated.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FLEET_DIR=$(realpath -m -- "${FLEET_DIR:-$root/.cache/fleet}")
FLEET_MEMBERS=${FLEET_MEMBERS:-2}
FLEET_PREFIX=${FLEET_PREFIX:-fleetdb}
FLEET_JOIN_TIMEOUT=${FLEET_JOIN_TIMEOUT:-5m}
FLEET_NODES=${FLEET_NODES:-simulated}
case "$FLEET_NODES" in
simulated | real) ;;
*) echo "fleet: FLEET_NODES=$FLEET_NODES: want simulated or real" >&2; exit 2 ;;
esac
export KWOK_WORKDIR="$FLEET_DIR/kwok"
# hack/realnode.sh reads the same folder and prefix.
export FLEET_DIR FLEET_PREFIX
# FLEET_DIR holds admin kubeconfigs and keys: the folder is 0700 and every
# kubeconfig 0600. `up` marks it as the fleet's (MARKER); `down` removes a
# folder only with that mark (or one an earlier version made: it has
# kwok/clusters), never a folder FLEET_DIR names by mistake.
MARKER="$FLEET_DIR/.fleetdb-fleet"
HUB_NS=fleetdb-system

members() { for i in $(seq 1 "$FLEET_MEMBERS"); do echo "member-$i"; done; }
kubeconfig() { echo "$FLEET_DIR/$1.kubeconfig"; }
cluster_name() { echo "$FLEET_PREFIX-$1"; }

bin() {
	BIN=$("$root/hack/toolchain.sh")
	KWOKCTL="$BIN/kwokctl"
	KUBECTL="$BIN/kubectl"
}

# moddir prints the module cache folder of a module pinned in test/tools/<tool>.
moddir() {
	(cd "$root/test/tools/$1" && GOFLAGS=-mod=mod go mod download -json "$2") |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

create() {
	local c=$1 kc audit=() extra=() crds=()
	kc=$(kubeconfig "$c")
	if [ -n "${FLEET_AUDIT_POLICY:-}" ]; then audit=(--kube-audit-policy "$FLEET_AUDIT_POLICY"); fi
	if [ -n "${FLEET_KWOKCTL_ARGS:-}" ]; then read -r -a extra <<<"$FLEET_KWOKCTL_ARGS"; fi
	if [ "$c" != hub ]; then crds=(--enable-crds=Stage); fi
	if [ "$c" != hub ] && [ "$FLEET_NODES" = real ]; then
		extra+=(--config "$("$root/hack/realnode.sh" kwokctl-config "$c")")
	fi
	if [ -s "$kc" ] && "$KUBECTL" --kubeconfig "$kc" get --raw /readyz >/dev/null 2>&1; then
		if [ "$c" = hub ] || "$KUBECTL" --kubeconfig "$kc" get crd stages.kwok.x-k8s.io >/dev/null 2>&1; then
			if [ "$c" = hub ] || [ "$FLEET_NODES" != real ] || real_ready "$c"; then
				echo "fleet: $c is up" >&2
				return
			fi
			echo "fleet: $c was created without its own Service range or kubelet client certificate for a real node: recreating it" >&2
		else
			echo "fleet: $c predates the CloudNativePG stages: recreating it" >&2
		fi
		"$KWOKCTL" delete cluster --name "$(cluster_name "$c")" --kubeconfig "$kc" >&2
	fi
	if "$KWOKCTL" get clusters 2>/dev/null | grep -x -- "$(cluster_name "$c")" >/dev/null; then
		echo "fleet: starting $c" >&2
		"$KWOKCTL" start cluster --name "$(cluster_name "$c")" --wait 120s >&2
	else
		echo "fleet: creating $c" >&2
		"$KWOKCTL" create cluster --name "$(cluster_name "$c")" --runtime binary \
			--kube-apiserver-binary="$BIN/kube-apiserver" --etcd-binary="$BIN/etcd" \
			--kube-controller-manager-binary="$BIN/kube-controller-manager" \
			--kube-scheduler-binary="$BIN/kube-scheduler" --kwok-controller-binary="$BIN/kwok" \
			--extra-args kube-controller-manager=enable-hostpath-provisioner=true \
			--extra-args kube-controller-manager=leader-elect=false \
			--extra-args "kube-controller-manager=flex-volume-plugin-dir=$FLEET_DIR/flexvolume" \
			--extra-args kube-scheduler=leader-elect=false \
			${crds[@]+"${crds[@]}"} ${audit[@]+"${audit[@]}"} ${extra[@]+"${extra[@]}"} \
			--kubeconfig "$kc" --wait 120s >&2
	fi
	(umask 077 && "$KWOKCTL" get kubeconfig --name "$(cluster_name "$c")" >"$kc.tmp") && mv "$kc.tmp" "$kc"
	# kwokctl writes its keys 0644 and its kubeconfig 0640.
	chmod -R go-rwx "$KWOK_WORKDIR/clusters/$(cluster_name "$c")"
	controllers_up "$c"
}

# real_ready is true when member $1's kubernetes Service has the address
# hack/realnode.sh kwokctl-config gave it (the member's own Service range)
# and its API server was started with a client certificate for the real
# node's kubelet (which takes no anonymous request).
real_ready() {
	local want
	want=$(awk '$1 == "-" && $2 ~ /^[0-9.]+$/ {print $2; exit}' "$FLEET_DIR/kwokctl-$1.yaml")
	grep -q kubelet-client-certificate "$KWOK_WORKDIR/clusters/$(cluster_name "$1")/kwok.yaml" 2>/dev/null &&
		[ "$("$KUBECTL" --kubeconfig "$(kubeconfig "$1")" -n default get service kubernetes -o jsonpath='{.spec.clusterIP}' 2>/dev/null)" = "$want" ]
}

# Each cluster runs one controller manager and one scheduler, so neither
# elects a leader: under load a missed Lease renewal (10 s) made them exit
# for good (the 20-member scale fleet lost its hub's controller manager so).
#
# controllers_up waits until the cluster's kube-controller-manager runs its
# controllers (it has published the kube-root-ca.crt ConfigMap in
# kube-system), and starts the cluster's components again when that process
# has exited: on a loaded machine with many clusters, kube-controller-manager
# gives up at start when its API server is not healthy within 10 s ("failed
# to wait for apiserver being healthy", then "leaderelection lost/stopped"),
# kwokctl's binary runtime does not restart it, and without it no
# ServiceAccount token is ever issued (the join waits for one).
controllers_up() {
	local c=$1 kc name restarts=0 deadline=$((SECONDS + 300))
	kc=$(kubeconfig "$c")
	name=$(cluster_name "$c")
	while :; do
		if pgrep -f "$KWOK_WORKDIR/clusters/$name/bin/kube-controller-manager" >/dev/null; then
			if "$KUBECTL" --kubeconfig "$kc" -n kube-system get configmap kube-root-ca.crt >/dev/null 2>&1; then
				return 0
			fi
		elif [ "$restarts" -lt 3 ]; then
			restarts=$((restarts + 1))
			echo "fleet: $c: kube-controller-manager exited; starting the cluster's components again ($restarts of 3)" >&2
			"$KWOKCTL" stop cluster --name "$name" >&2 || true
			"$KWOKCTL" start cluster --name "$name" --wait 120s >&2
		else
			echo "fleet: $c: kube-controller-manager exited again after 3 restarts" >&2
			return 1
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "fleet: $c: kube-controller-manager did not start its controllers within 300s" >&2
			return 1
		fi
		sleep 2
	done
}

prepare_member() {
	local c=$1 kc
	kc=$(kubeconfig "$c")
	if [ "$("$KUBECTL" --kubeconfig "$kc" get nodes --no-headers 2>/dev/null | wc -l)" -lt 2 ]; then
		"$KWOKCTL" scale node --replicas 2 --name "$(cluster_name "$c")" >&2
	fi
	"$KUBECTL" --kubeconfig "$kc" apply -f - >/dev/null <<'YAML'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
YAML
}

# cnpg installs CloudNativePG's CRDs in a member, then the kwok Stages: kwok's
# defaults (node-initialize, the node heartbeat matching the lease setting,
# pod-ready, pod-complete, pod-delete), hack/kwok/cnpg-stages.yaml and the
# test-only hack/kwok/test-stages.yaml (a failing backup Job, on request).
cnpg() {
	local c=$1 kc cnpgdir kwokdir heartbeat=heartbeat-with-lease/node-heartbeat-with-lease.yaml
	kc=$(kubeconfig "$c")
	cnpgdir=$(moddir cnpg github.com/cloudnative-pg/cloudnative-pg)/config/crd/bases
	kwokdir=$(moddir kwok sigs.k8s.io/kwok)/kustomize/stage
	case " ${FLEET_KWOKCTL_ARGS:-} " in
	*" --node-lease-duration-seconds=0 "*) heartbeat=heartbeat/node-heartbeat.yaml ;;
	esac
	# Server-side: the Cluster CRD is too large for client-side apply's annotation.
	"$KUBECTL" --kubeconfig "$kc" apply --server-side --force-conflicts -f "$cnpgdir" >/dev/null
	# kubectl wait fails at once on a CRD that has no status conditions yet: try again.
	local i
	for i in $(seq 1 30); do
		"$KUBECTL" --kubeconfig "$kc" wait --for=condition=Established crd/clusters.postgresql.cnpg.io --timeout=60s >/dev/null 2>&1 && break
		[ "$i" -lt 30 ] || { echo "fleet: the CloudNativePG CRDs are not established in $c" >&2; return 1; }
		sleep 1
	done
	# With real nodes the real operator and its webhooks run (hack/realnode.sh
	# cnpg): neither the Stages that play it nor the policy that plays its
	# webhook are installed, not even for a moment on a later `up`.
	local play=(-f "$root/hack/kwok/cnpg-stages.yaml" -f "$root/hack/kwok/test-stages.yaml")
	if [ "$FLEET_NODES" = real ]; then
		play=()
	else
		# CloudNativePG's webhook rules on the fields fleetdb writes, as an admission policy (no operator runs).
		"$KUBECTL" --kubeconfig "$kc" apply --server-side --force-conflicts -f "$root/hack/kwok/cnpg-webhook-policy.yaml" >/dev/null
	fi
	"$KUBECTL" --kubeconfig "$kc" apply \
		-f "$kwokdir/node/fast/node-initialize.yaml" -f "$kwokdir/node/$heartbeat" \
		-f "$kwokdir/pod/fast/pod-ready.yaml" -f "$kwokdir/pod/fast/pod-complete.yaml" -f "$kwokdir/pod/fast/pod-delete.yaml" \
		${play[@]+"${play[@]}"} >/dev/null
}

# hub_identity applies deploy/rbac to the hub, asks its token controller for a
# long-lived token of the hub's ServiceAccount (a kubernetes.io/
# service-account-token Secret: the hub runs outside the cluster here, with no
# projected token) and writes hub-identity.kubeconfig (mode 0600) for it.
hub_identity() {
	local hub out token secret=fleetdb-hub-token deadline server tmp
	hub=$(kubeconfig hub)
	out="$FLEET_DIR/hub-identity.kubeconfig"
	"$KUBECTL" --kubeconfig "$hub" apply --server-side --field-manager=fleetdb-fleet -k "$root/deploy/rbac" >/dev/null
	"$KUBECTL" --kubeconfig "$hub" apply --server-side --field-manager=fleetdb-fleet -f - >/dev/null <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: $secret
  namespace: $HUB_NS
  annotations: {kubernetes.io/service-account.name: fleetdb-hub}
type: kubernetes.io/service-account-token
YAML
	token="" deadline=$((SECONDS + 60))
	while [ -z "$token" ]; do
		token=$("$KUBECTL" --kubeconfig "$hub" -n "$HUB_NS" get secret "$secret" \
			-o go-template='{{with .data}}{{with index . "token"}}{{base64decode .}}{{end}}{{end}}' 2>/dev/null || true)
		[ -n "$token" ] && break
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "fleet: the hub's token controller did not fill in $HUB_NS/$secret within 60s" >&2
			return 1
		fi
		sleep 1
	done
	server=$("$KUBECTL" --kubeconfig "$hub" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
	tmp=$(mktemp -d)
	"$KUBECTL" --kubeconfig "$hub" -n "$HUB_NS" get secret "$secret" -o go-template='{{index .data "ca.crt" | base64decode}}' >"$tmp/ca.crt"
	(
		umask 077
		rm -f "$out.tmp"
		"$KUBECTL" config --kubeconfig "$out.tmp" set-cluster hub --server "$server" --certificate-authority "$tmp/ca.crt" --embed-certs=true >/dev/null
		"$KUBECTL" config --kubeconfig "$out.tmp" set-credentials fleetdb-hub --token "$token" >/dev/null
		"$KUBECTL" config --kubeconfig "$out.tmp" set-context fleetdb-hub --cluster hub --user fleetdb-hub --namespace "$HUB_NS" >/dev/null
		"$KUBECTL" config --kubeconfig "$out.tmp" use-context fleetdb-hub >/dev/null
		mv "$out.tmp" "$out"
	)
	rm -rf "$tmp"
}

# register joins a member with the hub's own identity (deploy/member's
# ServiceAccount, least-privilege RBAC and admission policy), exactly as a real
# fleet is joined, with `kubectl fleetdb join` (built from cmd/kubectl-fleetdb
# into FLEET_DIR/bin): every run proves the join path and that identity. The
# hub may not run yet, so join does not wait for the member to be Ready.
register() {
	local c=$1 i=$2 cli="$FLEET_DIR/bin/kubectl-fleetdb"
	# A member created minutes ago may have lost its controller manager since.
	controllers_up "$c"
	# Built once per `up`, before the first member: always the checkout's CLI.
	if [ "$i" = 1 ]; then (cd "$root" && go build -o "$cli" ./cmd/kubectl-fleetdb); fi
	"$cli" join "$c" --kubeconfig "$(kubeconfig hub)" --member-kubeconfig "$(kubeconfig "$c")" \
		--hub-namespace "$HUB_NS" --labels "fleetdb.io/sample=true,region=region-$i,tier=prod" \
		--all-namespaces --replication-host-template "\$(DATABASE)-rw.\$(NAMESPACE).$c.fleet.local" \
		--wait=false --timeout "$FLEET_JOIN_TIMEOUT" >/dev/null
}

up() {
	bin
	mkdir -p "$FLEET_DIR"
	chmod 700 "$FLEET_DIR"
	touch "$MARKER"
	local f
	for f in "$FLEET_DIR"/*.kubeconfig; do [ -e "$f" ] && chmod 600 "$f"; done
	create hub
	local i=0
	for c in $(members); do
		create "$c"
		cnpg "$c"
		prepare_member "$c"
	done
	local hub
	hub=$(kubeconfig hub)
	"$KUBECTL" --kubeconfig "$hub" apply -k "$root/deploy/crds" >/dev/null
	"$KUBECTL" --kubeconfig "$hub" wait --for=condition=Established crd/databases.fleetdb.io crd/memberclusters.fleetdb.io --timeout=60s >/dev/null
	# Deletion protection is the API server's (a ValidatingAdmissionPolicy).
	"$KUBECTL" --kubeconfig "$hub" apply -f "$root/deploy/hub/deletion_protection.yaml" >/dev/null
	# The recorded backend is not changed to another (a ValidatingAdmissionPolicy).
	"$KUBECTL" --kubeconfig "$hub" apply -f "$root/deploy/hub/backend_record.yaml" >/dev/null
	# The teardown finalizer at admission (a MutatingAdmissionPolicy).
	"$KUBECTL" --kubeconfig "$hub" apply -f "$root/deploy/hub/teardown_finalizer.yaml" >/dev/null
	"$KUBECTL" --kubeconfig "$hub" create namespace "$HUB_NS" --dry-run=client -o yaml | "$KUBECTL" --kubeconfig "$hub" apply -f - >/dev/null
	hub_identity
	for c in $(members); do
		i=$((i + 1))
		register "$c" "$i"
	done
	if [ "$FLEET_NODES" = real ]; then
		for c in $(members); do
			"$root/hack/realnode.sh" up "$c"
			"$root/hack/realnode.sh" cnpg "$c"
		done
	fi
	echo "fleet: hub and $FLEET_MEMBERS member(s) ready under $FLEET_DIR ($FLEET_NODES nodes)" >&2
}

down() {
	bin
	# Real nodes first (their processes, namespaces, routes, mounts, cgroups),
	# while their members' API servers still answer.
	if ! "$root/hack/realnode.sh" check >/dev/null 2>&1; then
		"$root/hack/realnode.sh" down-all
	fi
	# Host-path volumes live under /tmp/hostpath_pv (hard-coded in Kubernetes):
	# remove exactly the ones our members' PersistentVolumes point at, each
	# only when it resolves (.., symbolic links) to a folder inside it.
	for c in $(members); do
		local kc
		kc=$(kubeconfig "$c")
		[ -s "$kc" ] || continue
		"$KUBECTL" --kubeconfig "$kc" get pv -o jsonpath='{range .items[*]}{.spec.hostPath.path}{"\n"}{end}' 2>/dev/null |
			while read -r path; do
				remove_volume "$path"
			done || true
	done
	for c in hub $(members); do
		if "$KWOKCTL" get clusters 2>/dev/null | grep -x -- "$(cluster_name "$c")" >/dev/null; then
			"$KWOKCTL" delete cluster --name "$(cluster_name "$c")" --kubeconfig "$(kubeconfig "$c")" >&2 || true
		fi
	done
	if [ -e "$MARKER" ] || [ -d "$FLEET_DIR/kwok/clusters" ]; then
		rm -rf -- "$FLEET_DIR"
		echo "fleet: removed" >&2
	elif [ -e "$FLEET_DIR" ]; then
		echo "fleet: left $FLEET_DIR as it is: it holds no fleet made by this script" >&2
	fi
}

# remove_volume removes a host-path volume's folder when its path, resolved,
# is a folder below /tmp/hostpath_pv; anything else is named and left.
remove_volume() {
	local real
	real=$(realpath -m -- "$1")
	case "$real" in
	/tmp/hostpath_pv/?*) rm -rf -- "$real" ;;
	*) echo "fleet: left $1 as it is: not a folder below /tmp/hostpath_pv" >&2 ;;
	esac
}

envvars() {
	echo "HUB_KUBECONFIG=$(kubeconfig hub)"
	echo "HUB_IDENTITY_KUBECONFIG=$FLEET_DIR/hub-identity.kubeconfig"
	local list=""
	for c in $(members); do list="$list,$c=$(kubeconfig "$c")"; done
	echo "MEMBER_KUBECONFIGS=${list#,}"
}

case "${1:-}" in
up) up ;;
down) down ;;
env) envvars ;;
*)
	echo "usage: $0 up|down|env" >&2
	exit 2
	;;
esac
