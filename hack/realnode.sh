#!/usr/bin/env bash
# A node that runs real pods for a member cluster of the local fleet
# (hack/fleet.sh), without Docker: containerd 2 + runc, kubelet and kube-proxy
# as processes, in the member's own network namespace joined to one host
# bridge.
#
#   hack/realnode.sh up MEMBER      start (or keep) MEMBER's real node; MEMBER is
#                                   member-N of the fleet under FLEET_DIR
#   hack/realnode.sh down MEMBER    stop MEMBER's node and remove all it created
#   hack/realnode.sh down-all       the same for every real node of FLEET_PREFIX
#   hack/realnode.sh smoke MEMBER   run a pause pod and a busybox pod on the node
#                                   and reach one through a Service (kube-proxy)
#   hack/realnode.sh cnpg MEMBER    install the real CloudNativePG operator in
#                                   MEMBER (images from hack/realnode-images.sh,
#                                   its release manifest, webhooks live) in place
#                                   of the kwok Stages that play it, and
#                                   local-path-provisioner as the default
#                                   StorageClass
#   hack/realnode.sh check          list what real nodes of FLEET_PREFIX left on
#                                   the host; exits 1 when anything is left
#   hack/realnode.sh kwokctl-config MEMBER
#                                   write the kwokctl configuration for creating
#                                   MEMBER's cluster (hack/realnodes/kwokctl.yaml
#                                   with MEMBER's own Service range) and print
#                                   its path; hack/fleet.sh uses it when
#                                   FLEET_NODES=real
#
# Layout, for member-N (N from 1 to 200):
#   network namespace $FLEET_PREFIX-rn-member-N, its eth0 at 10.213.0.(10+N)/24
#   on the host bridge REALNODE_BRIDGE (default fdbrn0, 10.213.0.1/24;
#   REALNODE_NODE_NET and REALNODE_POD_NET move the two /16s);
#   pod CIDR 10.214.N.0/24 (a bridge cni0 inside the namespace, CNI bridge +
#   host-local + portmap from Debian's plugins), routed from the host and from
#   every other real node to that node; the namespace has no default route:
#   it reaches the host's own addresses (the member's API server) and the
#   other real nodes, nothing else. The host does not forward (ip_forward
#   stays as it is), and no iptables rule is added on the host.
#   cgroups /$FLEET_PREFIX-rn-member-N in every hierarchy (the host mounts
#   cgroup v1 with v2 beside it: the kubelet runs with failCgroupV1: false);
#   the node's processes live in .../node, pods under kubelet's cgroupRoot.
#   A private mount namespace (with its own /run) holds containerd's and
#   kubelet's mounts: they go when its last process goes.
#   State under $FLEET_DIR/realnodes/member-N.
#   Service range $REALNODE_SERVICE_NET.N.0/24 (default 10.215.N.0/24), set
#   when the member's cluster is created (kwokctl-config): no two members'
#   Service addresses overlap. Cluster DNS: CoreDNS (hack/realnode-tools.sh)
#   as the Deployment coredns behind the Service kube-dns at the range's .10
#   (for a member created without kwokctl-config: the .10 of the range its
#   kubernetes Service is in), the kubelet's clusterDNS.
# Node name: member-N-real, labelled fleetdb.io/real-node=true. The member's
# simulated (kwok) nodes get the taint fleetdb.io/simulated=true:NoSchedule
# while it has a real node, so that new pods land on the real one; `down`
# takes the taint off again.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FLEET_DIR=$(realpath -m -- "${FLEET_DIR:-$root/.cache/fleet}")
FLEET_PREFIX=${FLEET_PREFIX:-fleetdb}
REALNODE_BRIDGE=${REALNODE_BRIDGE:-fdbrn0}
# Two /16s of private addresses, not routed on this host (check `ip route`):
# the nodes' network ($REALNODE_NODE_NET.0.0/24) and the pod CIDRs
# ($REALNODE_POD_NET.N.0/24). A second fleet on the same host (the real-node
# test) uses its own bridge and its own two.
REALNODE_NODE_NET=${REALNODE_NODE_NET:-10.213}
REALNODE_POD_NET=${REALNODE_POD_NET:-10.214}
# The members' Service ranges ($REALNODE_SERVICE_NET.N.0/24), given to their
# API servers when the fleet creates them (kwokctl-config).
REALNODE_SERVICE_NET=${REALNODE_SERVICE_NET:-10.215}
NODE_NET=$REALNODE_NODE_NET.0
HOST_IP=$NODE_NET.1

die() {
	echo "realnode: $*" >&2
	exit 1
}

# Ownership: the harness removes only what it made. The links it creates
# (the bridge, the host ends of the veths) carry an alias naming this fleet
# (owner_mark: a hash of FLEET_DIR), the host routes it adds carry the route
# protocol ROUTE_PROTO (a route of another protocol to the same range is
# never deleted: `ip route del ... proto N` matches that protocol only), and a
# node's namespace and cgroups are this fleet's while its state folder
# ($FLEET_DIR/realnodes/member-N, made before any of them and removed after
# all of them) is there, or its namespace holder names that folder. A host
# whose bridge or routes predate the fleet, or a second checkout with the same
# FLEET_PREFIX, keeps them: `up` refuses with what to change instead.
ROUTE_PROTO=213
owner_mark() { echo "fleetdb-realnode $(printf '%s' "$FLEET_DIR" | sha256sum | cut -c1-16)"; }
link_owned() { [ "$(cat "/sys/class/net/$1/ifalias" 2>/dev/null)" = "$(owner_mark)" ]; }

# preflight names everything this host lacks for a real node, in one message.
preflight() {
	local missing=()
	[ "$(id -u)" = 0 ] || missing+=("root (run as uid 0)")
	grep -qw overlay /proc/filesystems || missing+=("overlayfs (no 'overlay' in /proc/filesystems)")
	unshare --net true 2>/dev/null || missing+=("network namespaces (unshare --net fails)")
	unshare --mount true 2>/dev/null || missing+=("mount namespaces (unshare --mount fails)")
	[ -d /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ] || missing+=("cgroups (no memory controller under /sys/fs/cgroup)")
	command -v ip >/dev/null || missing+=("the ip command (iproute2)")
	command -v gcc >/dev/null || missing+=("gcc (builds the pause program)")
	if [ ${#missing[@]} -gt 0 ]; then
		die "this host cannot run a real node; missing: $(
			IFS=';'
			echo "${missing[*]}"
		)"
	fi
}

index() {
	case "$1" in
	member-[1-9] | member-[1-9][0-9] | member-1[0-9][0-9] | member-200) echo "${1#member-}" ;;
	*) die "unknown member '$1' (want member-N, N from 1 to 200)" ;;
	esac
}

member=""
setvars() {
	member=$1
	i=$(index "$member")
	ns="$FLEET_PREFIX-rn-$member"
	cg="$FLEET_PREFIX-rn-$member"
	veth="$REALNODE_BRIDGE-$i"
	node_ip="$NODE_NET.$((10 + i))"
	pod_cidr="$REALNODE_POD_NET.$i.0/24"
	node="$member-real"
	dir="$FLEET_DIR/realnodes/$member"
	# Inside the node's mount namespace $dir is also $nd, and containerd's
	# socket is in the namespace's own /run: unix socket paths must stay under
	# 108 bytes, and a test's FLEET_DIR can be long.
	nd=/run/node
	sock=/run/containerd/containerd.sock
	kc="$FLEET_DIR/$member.kubeconfig"
}

tools() {
	BIN=$("$root/hack/realnode-tools.sh")
	KUBECTL="$("$root/hack/toolchain.sh")/kubectl"
}

k() { "$KUBECTL" --kubeconfig "$kc" --request-timeout=20s "$@"; }

# hierarchies prints every cgroup hierarchy mounted under /sys/fs/cgroup.
hierarchies() {
	if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
		echo /sys/fs/cgroup
		return
	fi
	awk '$2 ~ "^/sys/fs/cgroup/" && ($3 == "cgroup" || $3 == "cgroup2") {print $2}' /proc/self/mounts
}

make_cgroups() {
	local h d
	for h in $(hierarchies); do
		for d in "$h/$cg" "$h/$cg/node"; do
			mkdir -p "$d"
			# A v1 cpuset child starts with no CPUs and no memory nodes.
			if [ -f "$d/cpuset.cpus" ] && [ -z "$(cat "$d/cpuset.cpus")" ]; then
				cat "$(dirname "$d")/cpuset.cpus" >"$d/cpuset.cpus"
				cat "$(dirname "$d")/cpuset.mems" >"$d/cpuset.mems"
			fi
		done
	done
}

# join_cgroups moves the calling shell ($BASHPID) into the node's cgroups.
join_cgroups() {
	local h
	for h in $(hierarchies); do echo "$BASHPID" >"$h/$cg/node/cgroup.procs"; done
}

# node_pids prints every process in the node's cgroups (node, pods, shims).
node_pids() {
	local h
	for h in $(hierarchies); do
		if [ -d "$h/$cg" ]; then find "$h/$cg" -name cgroup.procs -exec cat {} + 2>/dev/null || true; fi
	done | sort -un
}

# start NAME CMD... runs CMD in the node's network and mount namespaces and
# cgroups, logging to $dir/NAME.log, in a session of its own (setsid; the
# subshell is no process group leader, so setsid does not fork and $! stays
# CMD's pid): a Ctrl-C in the terminal of `make run NODES=real` goes to its
# foreground process group, and the kubelet and containerd, which handle
# SIGINT, would stop with the hub.
start() {
	local name=$1 holder
	shift
	holder=$(cat "$dir/holder.pid")
	(
		join_cgroups
		exec setsid nsenter --target "$holder" --mount --net -- "$@" >"$dir/$name.log" 2>&1 </dev/null
	) &
	echo $! >"$dir/$name.pid"
}

wait_for() {
	local what=$1 timeout=$2 deadline
	shift 2
	deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "realnode: $member: $what not within ${timeout}s" >&2
			return 1
		fi
		sleep 1
	done
}

in_ns() { ip netns exec "$ns" "$@"; }

# other_nodes prints "index" for every other real node of this fleet (its
# namespace is there and so is its state folder).
other_nodes() {
	local n
	for n in $(ip netns list | awk '{print $1}'); do
		case "$n" in "$FLEET_PREFIX-rn-member-"*) ;; *) continue ;; esac
		[ "$n" != "$ns" ] && [ -d "$FLEET_DIR/realnodes/${n#"$FLEET_PREFIX-rn-"}" ] && echo "${n#"$FLEET_PREFIX-rn-member-"}"
	done
	return 0
}

# node_exists is true when anything of member's node is on the host: its
# network namespace or its cgroup.
node_exists() {
	local h
	ip netns list | awk '{print $1}' | grep -qx -- "$ns" && return 0
	for h in $(hierarchies); do [ -d "$h/$cg" ] && return 0; done
	return 1
}

# node_owned is true when member's node is this fleet's: its state folder is
# under FLEET_DIR, or a process of it (the namespace holder binds that
# folder) names it.
node_owned() {
	[ -d "$dir" ] && return 0
	local p
	for p in /proc/[0-9]*; do
		case "$(tr '\0' ' ' 2>/dev/null <"$p/cmdline")" in *"mount --bind '$dir' "*) return 0 ;; esac
	done
	return 1
}

network() {
	if ip link show "$REALNODE_BRIDGE" >/dev/null 2>&1; then
		link_owned "$REALNODE_BRIDGE" || die "$member: the host has a link $REALNODE_BRIDGE this fleet did not make (another fleet's, or the host's own): give this fleet its own with REALNODE_BRIDGE (and REALNODE_NODE_NET, REALNODE_POD_NET, REALNODE_SERVICE_NET)"
	fi
	if [ -n "$(ip route show exact "$pod_cidr")" ]; then
		die "$member: the host already routes $pod_cidr ($(ip route show exact "$pod_cidr" | head -1)): give this fleet other pod ranges with REALNODE_POD_NET"
	fi
	if ip link show "$veth" >/dev/null 2>&1; then
		die "$member: the host has a link $veth this fleet did not make: give this fleet its own with REALNODE_BRIDGE"
	fi
	if ! ip link show "$REALNODE_BRIDGE" >/dev/null 2>&1; then
		ip link add "$REALNODE_BRIDGE" type bridge
		ip link set "$REALNODE_BRIDGE" alias "$(owner_mark)"
		ip addr add "$HOST_IP/24" dev "$REALNODE_BRIDGE"
		ip link set "$REALNODE_BRIDGE" up
	fi
	ip netns add "$ns"
	ip link add "$veth" type veth peer name eth0 netns "$ns"
	ip link set "$veth" alias "$(owner_mark)"
	ip link set "$veth" master "$REALNODE_BRIDGE" up
	in_ns ip link set lo up
	in_ns ip addr add "$node_ip/24" dev eth0
	in_ns ip link set eth0 up
	in_ns sysctl -qw net.ipv4.ip_forward=1
	in_ns sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
	# The host's own addresses (the member's API server advertises one of them
	# as the kubernetes Service's endpoint), through the bridge.
	local a j
	for a in $(ip -4 -o addr show scope global | awk '{split($4, p, "/"); print p[1]}'); do
		[ "$a" = "$HOST_IP" ] || in_ns ip route add "$a/32" via "$HOST_IP"
	done
	ip route add "$pod_cidr" via "$node_ip" dev "$REALNODE_BRIDGE" proto "$ROUTE_PROTO"
	for j in $(other_nodes); do
		in_ns ip route add "$REALNODE_POD_NET.$j.0/24" via "$NODE_NET.$((10 + j))"
		ip netns exec "$FLEET_PREFIX-rn-member-$j" ip route add "$pod_cidr" via "$node_ip"
	done
}

write_configs() {
	local server port
	mkdir -p "$dir/cni/net.d" "$dir/kubelet" "$dir/pod-logs"
	cat >"$dir/cni/net.d/10-fleetdb.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "fleetdb-realnode",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$dir/cni/ipam", "ranges": [[{"subnet": "$pod_cidr"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
	cat >"$dir/containerd.toml" <<TOML
version = 3
root = "$nd/containerd/root"
state = "$nd/containerd/state"
[grpc]
  address = "$sock"
[plugins.'io.containerd.nri.v1.nri']
  disable = true
# Its default, /opt/containerd, would stay on the host.
[plugins.'io.containerd.internal.v1.opt']
  path = "$nd/opt"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "registry.k8s.io/pause:3.10.2"
[plugins.'io.containerd.cri.v1.runtime']
  # This host's root lacks CAP_SYS_RESOURCE, so no process may lower its
  # oom_score_adj: runc failed the sandbox the kubelet asks -998 for
  # ("nsexec: failed to update /proc/self/oom_score_adj: Permission denied").
  # containerd raises such requests to its own value instead.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = "$(command -v runc)"
    SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$dir/cni/net.d"
TOML
	# The kubelet talks to the member's API server over the bridge; the
	# server's certificate names localhost, hence tls-server-name.
	server=$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')
	port=${server##*:}
	(umask 077 && k config view --minify --flatten >"$dir/kubeconfig")
	cp "$(pki)/ca.crt" "$dir/client-ca.crt"
	"$KUBECTL" --kubeconfig "$dir/kubeconfig" config set-cluster "$(k config view --minify -o jsonpath='{.clusters[0].name}')" \
		--server "https://$HOST_IP:$port" --tls-server-name localhost >/dev/null
	chmod 600 "$dir/kubeconfig"
	# Cluster DNS at the .10 of the member's Service range (the range its
	# kubernetes Service, the range's .1, is in); the node itself resolves
	# nothing (an empty resolv.conf: pods have no route to the outside).
	local api_ip
	api_ip=$(k -n default get service kubernetes -o jsonpath='{.spec.clusterIP}')
	case "$api_ip" in *.1) ;; *) die "$member's kubernetes Service is at '$api_ip', not at the .1 of a /24 Service range" ;; esac
	dns_ip=${api_ip%.1}.10
	: >"$dir/resolv.conf"
	cat >"$dir/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host mounts cgroup v1 (with v2 beside it); Kubernetes 1.35+ kubelets
# refuse cgroup v1 unless told not to (KEP-5573).
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: /$cg
address: $node_ip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
# As kubeadm sets it: no anonymous request; a client certificate of the
# member's CA (its API server's, for logs, exec and port-forward:
# hack/realnodes/kwokctl.yaml) or a token the API server vouches for, and
# every request authorized by the API server (SubjectAccessReview).
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/client-ca.crt}
authorization: {mode: Webhook}
# Its default, /usr/libexec/kubernetes/kubelet-plugins/volume/exec, would stay
# on the host (and /var/log/containers: the node's mount namespace has a
# /var/log of its own).
volumePluginDir: $nd/volume-plugins
containerRuntimeEndpoint: unix://$sock
podLogsDir: $nd/pod-logs
resolvConf: $dir/resolv.conf
clusterDomain: cluster.local
clusterDNS: [$dns_ip]
serializeImagePulls: false
maxPods: 60
# A shared, busy build machine: evict only when really out of room.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
# No CAP_SYS_RESOURCE here (see containerd.toml): keep the kubelet's own
# oom_score_adj where it is rather than fail to lower it to -999.
oomScoreAdj: 0
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
YAML
	cat >"$dir/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kubeconfig}
hostnameOverride: $node
bindAddress: $node_ip
clusterCIDR: $pod_cidr
mode: iptables
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# nf_conntrack_max is global, not the namespace's: leave it alone.
conntrack: {maxPerCore: 0}
oomScoreAdj: 0
YAML
}

up() {
	preflight
	tools
	[ -s "$kc" ] || die "no member $member under $FLEET_DIR (start the fleet first: hack/fleet.sh up)"
	k get --raw /readyz >/dev/null || die "$member's API server is not answering ($kc)"
	if ip netns list | awk '{print $1}' | grep -qx -- "$ns" && [ -s "$dir/kubelet.pid" ] &&
		kill -0 "$(cat "$dir/kubelet.pid")" 2>/dev/null; then
		echo "realnode: $member: node $node is up" >&2
		return
	fi
	if node_exists && ! node_owned; then
		die "a real node $ns runs on this host for another fleet (no $dir here; a second checkout?): give this fleet its own FLEET_PREFIX, REALNODE_BRIDGE and REALNODE_*_NET"
	fi
	# Whatever an interrupted run of this fleet left goes first; a failure
	# from here on tears the half-started node down.
	down_member
	started=0
	trap 'if [ "$started" = 0 ]; then echo "realnode: $member: start failed, removing the half-started node" >&2; down_member; fi' EXIT
	local start_s=$SECONDS
	mkdir -p "$dir"
	network
	make_cgroups
	write_configs
	# The holder owns the node's mount namespace (private, with its own /run:
	# shim sockets, xtables lock) inside its network namespace.
	#
	# The kubelet sets six global kernel settings to the values it wants
	# (setupKernelTunables in pkg/kubelet/cm/container_manager_linux.go,
	# Kubernetes v1.36.3): vm.overcommit_memory=1, kernel.panic=10 and
	# kernel.panic_on_oops=1 would change this shared host for every process.
	# In the node's mount namespace each of them is a file already holding the
	# kubelet's value, so it reads what it wants and writes nothing.
	mkdir -p "$dir/sysctl"
	local tunables="vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1"
	tunables="$tunables kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000"
	local t f binds=""
	for t in $tunables; do
		f=${t%%=*}
		echo "${t#*=}" >"$dir/sysctl/${f//\//.}"
		binds="$binds mount --bind '$dir/sysctl/${f//\//.}' '/proc/sys/$f' &&"
	done
	(
		join_cgroups
		exec setsid nsenter --net="/run/netns/$ns" -- unshare --mount --propagation private -- \
			sh -c "mount -t tmpfs -o mode=0755 tmpfs /run && mount -t tmpfs -o mode=0755 tmpfs /var/log && mkdir $nd && mount --bind '$dir' $nd && $binds exec sleep infinity" </dev/null >"$dir/holder.log" 2>&1
	) &
	echo $! >"$dir/holder.pid"
	wait_for "the namespace holder" 10 grep -q " $nd " "/proc/$(cat "$dir/holder.pid")/mounts"
	start containerd env PATH="$BIN:$PATH" "$BIN/containerd" --config "$dir/containerd.toml"
	wait_for "containerd" 60 nsenter --target "$(cat "$dir/holder.pid")" --mount --net -- "$BIN/ctr" --address "$sock" version
	import_images "$BIN"/images/*.tar
	start kubelet "$BIN/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubeconfig" \
		--root-dir "$nd/kubelet" --hostname-override "$node" --node-ip "$node_ip" \
		--node-labels "fleetdb.io/real-node=true"
	start kube-proxy "$BIN/kube-proxy" --config "$dir/kube-proxy.yaml"
	wait_for "node $node Ready" 180 k wait "node/$node" --for=condition=Ready --timeout=5s
	local n
	for n in $(k get nodes -o jsonpath='{.items[*].metadata.name}'); do
		[ "$n" = "$node" ] || k taint nodes --overwrite "$n" fleetdb.io/simulated=true:NoSchedule >/dev/null
	done
	dns
	started=1
	echo "realnode: $member: node $node Ready, cluster DNS at $dns_ip, in $((SECONDS - start_s))s" >&2
}

# dns runs CoreDNS on the real node as the member's kube-dns (the Service at
# $dns_ip, the kubelet's clusterDNS): a CloudNativePG standby finds its
# primary as <cluster>-rw.<namespace>.svc. The RBAC is what the kubernetes
# plugin lists and watches (services, pods, endpointslices, namespaces:
# plugin/kubernetes/controller.go, CoreDNS v1.14.7; endpoints as CoreDNS's
# own manifest, github.com/coredns/deployment kubernetes/coredns.yaml.sed,
# grants too). The Corefile is that manifest's without forward/proxy (pods
# reach nothing outside the fleet), listening on 1053 as a non-root user
# (the Service maps port 53 to it).
dns() {
	local image
	image=$(cat "$BIN/coredns-image")
	k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:1053 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            ttl 30
        }
        cache 30
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      nodeSelector: {fleetdb.io/real-node: "true"}
      containers:
      - name: coredns
        image: $image
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        ports:
        - {name: dns, containerPort: 1053, protocol: UDP}
        - {name: dns-tcp, containerPort: 1053, protocol: TCP}
        readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
        livenessProbe: {httpGet: {path: /health, port: 8080}, periodSeconds: 10, failureThreshold: 5}
        resources: {requests: {cpu: 10m, memory: 32Mi}, limits: {memory: 128Mi}}
        securityContext: {runAsNonRoot: true, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
        volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $dns_ip
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, targetPort: 1053, protocol: UDP}
  - {name: dns-tcp, port: 53, targetPort: 1053, protocol: TCP}
YAML
	wait_for "cluster DNS (CoreDNS) Available" 180 \
		k -n kube-system wait deployment/coredns --for=condition=Available --timeout=5s
}

# kwokctl_config writes the kwokctl configuration MEMBER's cluster is created
# with (hack/realnodes/kwokctl.yaml, its Service range made MEMBER's own) and
# prints its path.
kwokctl_config() {
	local range=$REALNODE_SERVICE_NET.$i out="$FLEET_DIR/kwokctl-$member.yaml"
	mkdir -p "$FLEET_DIR"
	sed -e "s|@SERVICE_RANGE@|$range.0/24|g" -e "s|@KUBERNETES_SERVICE_IP@|$range.1|g" -e "s|@PKI@|$(pki)|g" \
		"$root/hack/realnodes/kwokctl.yaml" >"$out"
	echo "$out"
}

# pki prints the folder of the member cluster's certificates kwokctl made
# (hack/fleet.sh sets KWOK_WORKDIR to $FLEET_DIR/kwok).
pki() { echo "$FLEET_DIR/kwok/clusters/$FLEET_PREFIX-$member/pki"; }

# thaw_node thaws the node's cgroups and every one below them (a fault test
# freezes the node or one pod: a frozen process takes no signal, so
# kill_node would wait on it for nothing).
thaw_node() {
	local h f
	for h in $(hierarchies); do
		[ -d "$h/$cg" ] || continue
		while read -r f; do
			case "$f" in
			*/freezer.state) { echo THAWED >"$f"; } 2>/dev/null || true ;;
			*/cgroup.freeze) { echo 0 >"$f"; } 2>/dev/null || true ;;
			esac
		done < <(find "$h/$cg" \( -name freezer.state -o -name cgroup.freeze \) 2>/dev/null)
	done
	return 0
}

kill_node() {
	local pids sig tries
	thaw_node
	for sig in TERM KILL; do
		tries=0
		while pids=$(node_pids) && [ -n "$pids" ] && [ "$tries" -lt 20 ]; do
			# shellcheck disable=SC2086
			kill -"$sig" $pids 2>/dev/null || true
			tries=$((tries + 1))
			sleep 0.5
		done
	done
	pids=$(node_pids)
	[ -z "$pids" ] || echo "realnode: $member: processes that would not exit: $pids" >&2
}

down_member() {
	local h j
	if [ -n "${KUBECTL:-}" ] && [ -s "$kc" ]; then
		k delete node "$node" --ignore-not-found --wait=false >/dev/null 2>&1 || true
		k taint nodes --all fleetdb.io/simulated- >/dev/null 2>&1 || true
		k -n kube-system delete deployment/coredns service/kube-dns --ignore-not-found --wait=false >/dev/null 2>&1 || true
		if k get storageclass local-path >/dev/null 2>&1; then
			k annotate --overwrite storageclass local-path storageclass.kubernetes.io/is-default-class=false >/dev/null 2>&1 || true
			k annotate --overwrite storageclass standard storageclass.kubernetes.io/is-default-class=true >/dev/null 2>&1 || true
		fi
	fi
	kill_node
	for h in $(hierarchies); do
		[ -d "$h/$cg" ] && find "$h/$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	ip route del "$pod_cidr" proto "$ROUTE_PROTO" 2>/dev/null || true
	for j in $(other_nodes); do
		ip netns exec "$FLEET_PREFIX-rn-member-$j" ip route del "$pod_cidr" 2>/dev/null || true
	done
	if ip netns list | awk '{print $1}' | grep -qx -- "$ns"; then ip netns del "$ns"; fi
	if link_owned "$veth"; then ip link del "$veth" 2>/dev/null || true; fi
	if link_owned "$REALNODE_BRIDGE" && [ -z "$(other_nodes)" ]; then
		ip link del "$REALNODE_BRIDGE"
	fi
	rm -rf "$dir"
	rmdir "$FLEET_DIR/realnodes" 2>/dev/null || true
}

down() {
	tools_quiet
	if node_exists && ! node_owned; then
		die "$member: the real node $ns on this host is not this fleet's (no $dir): left as it is"
	fi
	down_member
	echo "realnode: $member: removed" >&2
}

# tools_quiet finds kubectl if it is already built, without building it.
tools_quiet() {
	KUBECTL=""
	local parent=${FLEETDB_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetdb/tools} b
	for b in "$parent"/k8s-*/kubectl; do [ -x "$b" ] && KUBECTL=$b; done
	return 0
}

# down_all removes every real node of this fleet: those with a state folder,
# and those of the prefix whose holder names this fleet's folder (a folder
# removed by hand while its node ran). A node of the prefix that is not this
# fleet's (a second checkout's) is named and left.
down_all() {
	local n d h
	tools_quiet
	for d in "$FLEET_DIR"/realnodes/member-*; do
		[ -d "$d" ] || continue
		setvars "$(basename "$d")"
		down_member
	done
	for n in $(ip netns list | awk '{print $1}'); do
		case "$n" in "$FLEET_PREFIX-rn-member-"*) ;; *) continue ;; esac
		down_if_owned "${n#"$FLEET_PREFIX-rn-"}"
	done
	for h in $(hierarchies); do
		for d in "$h/$FLEET_PREFIX-rn-member-"*; do
			[ -d "$d" ] || continue
			down_if_owned "${d##*/"$FLEET_PREFIX"-rn-}"
		done
	done
	if link_owned "$REALNODE_BRIDGE"; then ip link del "$REALNODE_BRIDGE"; fi
	rmdir "$FLEET_DIR/realnodes" 2>/dev/null || true
	echo "realnode: all real nodes of $FLEET_PREFIX removed" >&2
}

down_if_owned() {
	setvars "$1"
	if node_owned; then
		down_member
	elif node_exists; then
		echo "realnode: $member: left $ns as it is: not this fleet's (no $dir)" >&2
	fi
}

# check lists what real nodes of this fleet prefix left on the host.
check() {
	local left=() h d
	while read -r n _; do
		case "$n" in "$FLEET_PREFIX-rn-"*) left+=("network namespace $n") ;; esac
	done < <(ip netns list)
	link_owned "$REALNODE_BRIDGE" && left+=("bridge $REALNODE_BRIDGE")
	while read -r l; do
		link_owned "${l%%@*}" && left+=("link $l")
	done < <(ip -o link show | awk -F': ' -v b="$REALNODE_BRIDGE-" 'index($2, b) == 1 {print $2}')
	while read -r r; do left+=("route $r"); done < <(ip route show proto "$ROUTE_PROTO" | grep -F -e "$REALNODE_POD_NET." -e "$REALNODE_BRIDGE" || true)
	for h in $(hierarchies); do
		for d in "$h/$FLEET_PREFIX-rn-"*; do [ -e "$d" ] && left+=("cgroup $d"); done
	done
	while read -r m; do left+=("mount $m"); done < <(awk -v d="$FLEET_DIR/realnodes" 'index($2, d) == 1 {print $2}' /proc/self/mounts)
	local p cmd
	for p in /proc/[0-9]*; do
		cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
		case "$cmd" in *"$FLEET_DIR/realnodes"*) left+=("process ${p#/proc/}: ${cmd:0:120}") ;; esac
	done
	while read -r r; do left+=("iptables rule $r"); done < <(iptables-save 2>/dev/null | grep -F -e "$REALNODE_NODE_NET." -e "$REALNODE_POD_NET." -e "$REALNODE_BRIDGE" || true)
	[ -e "$FLEET_DIR/realnodes" ] && left+=("folder $FLEET_DIR/realnodes")
	if [ ${#left[@]} -gt 0 ]; then
		printf 'realnode: left on the host: %s\n' "${left[@]}" >&2
		return 1
	fi
	echo "realnode: nothing of $FLEET_PREFIX's real nodes is left on the host" >&2
}

# import_images loads image archives into the node's containerd (the k8s.io
# namespace the CRI plugin reads), under the names inside them.
import_images() {
	local img
	for img in "$@"; do
		nsenter --target "$(cat "$dir/holder.pid")" --mount --net -- \
			"$BIN/ctr" --address "$sock" -n k8s.io images import --local "$img" >>"$dir/ctr.log" 2>&1
	done
}

cnpg() {
	tools
	local images
	images=$("$root/hack/realnode-images.sh")
	[ -s "$dir/holder.pid" ] || die "$member has no real node (hack/realnode.sh up $member first)"
	import_images "$images/cnpg-operator.tar" "$images/postgresql.tar" "$images/local-path-provisioner.tar"
	# Volumes: local-path-provisioner (as kind has) with its folders under the
	# node's state folder, so `down` removes them; its StorageClass becomes
	# the member's default while the member has a real node.
	mkdir -p "$dir/volumes"
	sed "s|/opt/local-path-provisioner|$dir/volumes|" "$images/local-path-storage.yaml" | k apply -f - >/dev/null
	k annotate --overwrite storageclass standard storageclass.kubernetes.io/is-default-class=false >/dev/null 2>&1 || true
	k annotate --overwrite storageclass local-path storageclass.kubernetes.io/is-default-class=true >/dev/null
	wait_for "local-path-provisioner Available" 120 \
		k -n local-path-storage wait deployment/local-path-provisioner --for=condition=Available --timeout=5s
	# The kwok Stages that play CloudNativePG (hack/fleet.sh) would write
	# Cluster status beside the real operator; the admission policy that
	# plays its webhook (hack/kwok/cnpg-webhook-policy.yaml) goes too, so
	# that what refuses an object is the real webhook.
	k delete --ignore-not-found -f "$root/hack/kwok/cnpg-stages.yaml" >/dev/null
	k delete --ignore-not-found -f "$root/hack/kwok/cnpg-webhook-policy.yaml" >/dev/null
	k apply --server-side --force-conflicts -f "$images/release.yaml" >/dev/null
	wait_for "the CloudNativePG operator Available" 300 \
		k -n cnpg-system wait deployment/cnpg-controller-manager --for=condition=Available --timeout=5s
	# The API server calls the operator's webhooks: a server-side dry run of a
	# Cluster goes through both (defaulting, then validation).
	wait_for "CloudNativePG's webhooks answering" 120 k apply --dry-run=server -f - <<YAML
apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata: {name: realnode-webhook-check, namespace: default}
spec:
  instances: 1
  imageName: $(cat "$images/postgresql-image")
  storage: {size: 1Gi}
YAML
	echo "realnode: $member: CloudNativePG $(awk '$1=="image:" && $2 ~ /\/cloudnative-pg:/ {print $2; exit}' "$images/release.yaml") runs on $node, webhooks live" >&2
}

smoke() {
	tools
	local ip
	k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: realnode-pause, namespace: default}
spec:
  nodeName: $node
  containers: [{name: pause, image: registry.k8s.io/pause:3.10.2, imagePullPolicy: Never}]
---
apiVersion: v1
kind: Pod
metadata: {name: realnode-web, namespace: default, labels: {app: realnode-web}}
spec:
  nodeName: $node
  containers:
  - name: web
    image: fleetdb.local/busybox:1
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "mkdir -p /www && hostname > /www/index.html && exec busybox httpd -f -p 8080 -h /www"]
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: realnode-web, namespace: default}
spec:
  selector: {app: realnode-web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: realnode-client, namespace: default}
spec:
  nodeName: $node
  containers: [{name: c, image: fleetdb.local/busybox:1, imagePullPolicy: Never, command: ["sleep", "3600"]}]
YAML
	k wait pod/realnode-pause pod/realnode-web pod/realnode-client --for=condition=Ready --timeout=120s >&2
	ip=$(k get service realnode-web -o jsonpath='{.spec.clusterIP}')
	local got=""
	# Debian's static busybox wget crashes (static glibc name lookup): nc.
	local get="printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 $ip 80 | tail -n 1"
	wait_for "the Service realnode-web ($ip) through kube-proxy" 60 \
		sh -c "\"$KUBECTL\" --kubeconfig \"$kc\" exec realnode-client -- sh -c \"$get\" | grep -qx realnode-web"
	got=$(k exec realnode-client -- sh -c "$get")
	echo "realnode: $member: pods Running on $node; realnode-client read '$got' from the Service at $ip" >&2
	k delete pod realnode-pause realnode-web realnode-client --wait=false >/dev/null
	k delete service realnode-web >/dev/null
}

case "${1:-}" in
up | down | smoke | cnpg | kwokctl-config)
	[ -n "${2:-}" ] || die "usage: $0 $1 MEMBER"
	setvars "$2"
	case "$1" in kwokctl-config) kwokctl_config ;; *) "$1" ;; esac
	;;
down-all) down_all ;;
check) check ;;
*)
	echo "usage: $0 up|down|smoke|cnpg|kwokctl-config MEMBER | down-all | check" >&2
	exit 2
	;;
esac
