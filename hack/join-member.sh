#!/usr/bin/env bash
# Joins a member cluster to a fleetdb hub.
#
#   hack/join-member.sh --name eu-1 \
#     --member-kubeconfig eu-1.kubeconfig --hub-kubeconfig hub.kubeconfig \
#     [--labels region=eu,tier=prod] [--server https://eu-1.example:6443] \
#     [--member-context CTX] [--hub-context CTX] [--hub-namespace fleetdb-system] \
#     [--timeout 120] [--all-namespaces | --namespace-labels team=a,...] \
#     [--replication-host-template '$(DATABASE)-rw.$(NAMESPACE).eu-1.example.net' \
#      [--replication-port 5432]]
#
# What it does, idempotently (run it again to relabel a member or to hand the
# hub a rotated token):
#   1. applies deploy/member to the member: Namespace fleetdb-system, the
#      ServiceAccount fleetdb-hub-agent, its least-privilege ClusterRole and
#      binding, and a long-lived token Secret for it;
#   2. waits until the member's token controller has filled in the token;
#   3. builds a kubeconfig for that ServiceAccount (CA from the token Secret,
#      server from --server);
#   4. writes it on the hub as Secret <name>-kubeconfig (key "kubeconfig") in the
#      hub namespace, and creates or updates MemberCluster <name> with exactly
#      the --labels given (server-side apply: labels dropped from --labels are
#      removed, labels others set are kept).
#   5. sets the MemberCluster's spec.namespaceSelector: --all-namespaces lets
#      Databases of every hub namespace use the member, --namespace-labels only
#      those of namespaces with these labels; with neither, the selector is
#      left unset and no namespace may use the member until a platform admin
#      sets one (fleetdb's safe default).
#   6. with --replication-host-template, sets spec.replication: the address at
#      which the other members reach a Database's primary in this member
#      (PrimaryStandby Databases wait for it; see README, Primary/standby
#      topology). Routing that name to the member is the platform team's job.
#      Pass it on every run: the MemberCluster is applied as a whole, and a run
#      without it removes spec.replication (PrimaryStandby Databases on the
#      member then wait; nothing is deleted).
#
# --server is the member API server's address as the hub reaches it, which is
# not always the address in your own kubeconfig: on kind, the hub's pods reach a
# member at https://<kind-cluster>-control-plane:6443 over the docker network,
# while your kubeconfig says https://127.0.0.1:<port>. It defaults to the server
# of the member kubeconfig's current context.
#
# The hub's CRDs must be installed (kubectl apply -k deploy/crds, or deploy/hub).
# Uses kubectl from $KUBECTL or PATH. Nothing is written to your kubeconfigs.
set -euo pipefail

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
	exit "${1:-0}"
}

die() {
	echo "join-member: $*" >&2
	exit 1
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kubectl_bin=${KUBECTL:-kubectl}

name="" member_kubeconfig="" hub_kubeconfig="" labels="" server="" ns_selector=""
member_context="" hub_context="" hub_namespace="fleetdb-system" timeout=120
repl_host="" repl_port=5432
while [ $# -gt 0 ]; do
	case "$1" in
	--name) name=${2:?--name needs a value}; shift 2 ;;
	--member-kubeconfig) member_kubeconfig=${2:?--member-kubeconfig needs a value}; shift 2 ;;
	--hub-kubeconfig) hub_kubeconfig=${2:?--hub-kubeconfig needs a value}; shift 2 ;;
	--labels) labels=${2?--labels needs a value}; shift 2 ;;
	--server) server=${2:?--server needs a value}; shift 2 ;;
	--member-context) member_context=${2:?--member-context needs a value}; shift 2 ;;
	--hub-context) hub_context=${2:?--hub-context needs a value}; shift 2 ;;
	--hub-namespace) hub_namespace=${2:?--hub-namespace needs a value}; shift 2 ;;
	--timeout) timeout=${2:?--timeout needs a value}; shift 2 ;;
	--all-namespaces) ns_selector="{}"; shift ;;
	--replication-host-template) repl_host=${2:?--replication-host-template needs a value}; shift 2 ;;
	--replication-port) repl_port=${2:?--replication-port needs a value}; shift 2 ;;
	--namespace-labels)
		ns_pairs=${2:?--namespace-labels needs k=v[,k=v...]}; shift 2
		ns_selector="{matchLabels: {"
		IFS=',' read -r -a pairs <<<"$ns_pairs"
		for pair in "${pairs[@]}"; do
			[[ "$pair" == *=* ]] || die "--namespace-labels takes k=v[,k=v...]; got '$pair'"
			ns_selector+="\"${pair%%=*}\": \"${pair#*=}\", "
		done
		ns_selector="${ns_selector%, }}}"
		;;
	-h | --help) usage 0 ;;
	*) echo "join-member: unknown argument $1" >&2; usage 2 ;;
	esac
done

[ -n "$name" ] || die "--name is required"
[ -n "$member_kubeconfig" ] || die "--member-kubeconfig is required"
[ -n "$hub_kubeconfig" ] || die "--hub-kubeconfig is required"
[ -r "$member_kubeconfig" ] || die "cannot read $member_kubeconfig"
[ -r "$hub_kubeconfig" ] || die "cannot read $hub_kubeconfig"
if ! [[ "$name" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || [ "${#name}" -gt 63 ]; then
	die "--name must be a DNS label (lower-case letters, digits and '-', at most 63 characters): $name"
fi
[[ "$timeout" =~ ^[0-9]+$ ]] || die "--timeout is a number of seconds: $timeout"
command -v "$kubectl_bin" >/dev/null || die "kubectl not found (set KUBECTL or put it on PATH)"

member=("$kubectl_bin" --kubeconfig "$member_kubeconfig")
[ -z "$member_context" ] || member+=(--context "$member_context")
hub=("$kubectl_bin" --kubeconfig "$hub_kubeconfig")
[ -z "$hub_context" ] || hub+=(--context "$hub_context")

# Labels as YAML map entries; keys and values are validated by the API server.
label_yaml=""
if [ -n "$labels" ]; then
	IFS=',' read -r -a pairs <<<"$labels"
	for pair in "${pairs[@]}"; do
		[ -n "$pair" ] || continue
		[[ "$pair" == *=* ]] || die "--labels takes k=v[,k=v...]; got '$pair'"
		key=${pair%%=*} value=${pair#*=}
		[ -n "$key" ] || die "--labels: empty key in '$pair'"
		label_yaml+=$'\n'"    \"$key\": \"$value\""
	done
fi
[ -n "$label_yaml" ] || label_yaml=" {}"

if [ -z "$server" ]; then
	server=$("${member[@]}" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
	[ -n "$server" ] || die "no server in $member_kubeconfig; pass --server"
	echo "join-member: --server not given, using $server from the member kubeconfig" >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "join-member: installing the hub's identity in member $name"
"${member[@]}" apply --server-side --field-manager=fleetdb-join -k "$root/deploy/member" >/dev/null

secret=fleetdb-hub-agent-token
echo "join-member: waiting for the token of $secret"
token=""
deadline=$((SECONDS + timeout))
while :; do
	token=$("${member[@]}" -n fleetdb-system get secret "$secret" \
		-o go-template='{{with .data}}{{with index . "token"}}{{base64decode .}}{{end}}{{end}}' 2>/dev/null || true)
	[ -z "$token" ] || break
	[ "$SECONDS" -lt "$deadline" ] || die "the member did not issue a token for $secret within ${timeout}s (is its kube-controller-manager running?)"
	sleep 1
done
"${member[@]}" -n fleetdb-system get secret "$secret" \
	-o go-template='{{index .data "ca.crt" | base64decode}}' >"$tmp/ca.crt"
[ -s "$tmp/ca.crt" ] || die "$secret has no ca.crt"

kubeconfig="$tmp/kubeconfig"
cfg=("$kubectl_bin" config --kubeconfig "$kubeconfig")
"${cfg[@]}" set-cluster "$name" --server "$server" --certificate-authority "$tmp/ca.crt" --embed-certs=true >/dev/null
"${cfg[@]}" set-credentials fleetdb-hub-agent --token "$token" >/dev/null
"${cfg[@]}" set-context "$name" --cluster "$name" --user fleetdb-hub-agent >/dev/null
"${cfg[@]}" use-context "$name" >/dev/null

echo "join-member: writing Secret $hub_namespace/$name-kubeconfig on the hub"
"${hub[@]}" create namespace "$hub_namespace" --dry-run=client -o yaml |
	"${hub[@]}" apply --server-side --field-manager=fleetdb-join -f - >/dev/null
"${hub[@]}" -n "$hub_namespace" create secret generic "$name-kubeconfig" \
	--from-file=kubeconfig="$kubeconfig" --dry-run=client -o yaml |
	"${hub[@]}" label --local -f - -o yaml app.kubernetes.io/part-of=fleetdb fleetdb.io/member-cluster="$name" |
	"${hub[@]}" apply --server-side --force-conflicts --field-manager=fleetdb-join -f - >/dev/null

echo "join-member: registering MemberCluster $name"
"${hub[@]}" wait --for=condition=Established --timeout=60s crd/memberclusters.fleetdb.io >/dev/null ||
	die "the MemberCluster CRD is not installed on the hub (kubectl apply -k deploy/crds)"
cat >"$tmp/membercluster.yaml" <<EOF
apiVersion: fleetdb.io/v1alpha1
kind: MemberCluster
metadata:
  name: "$name"
  labels:$label_yaml
spec:
  kubeconfigSecretRef:
    name: "$name-kubeconfig"
    key: kubeconfig${ns_selector:+
  namespaceSelector: $ns_selector}${repl_host:+
  replication:
    hostTemplate: '$repl_host'
    port: $repl_port}
EOF
"${hub[@]}" apply --server-side --field-manager=fleetdb-join -f "$tmp/membercluster.yaml" >/dev/null

[ -n "$ns_selector" ] || echo "join-member: no --all-namespaces or --namespace-labels: no hub namespace may place Databases on $name yet (set spec.namespaceSelector)"
echo "join-member: $name joined; watch it with: kubectl get membercluster $name -w"
