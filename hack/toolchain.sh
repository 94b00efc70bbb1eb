#!/usr/bin/env bash
# Builds the pinned control-plane binaries (kube-apiserver, etcd,
# kube-controller-manager, kube-scheduler, kubectl, kwok, kwokctl) from their Go
# modules under test/tools/ and prints the folder that holds them.
#
# The folder is keyed by a hash of the pinning go.mod/go.sum files, so a version
# bump builds into a new folder and an unchanged pin builds nothing. It lives in
# the user's cache directory (like setup-envtest's assets) so that it survives
# fresh clones; FLEETDB_TOOLS_DIR overrides the parent folder. A build ends by
# recording the hashes of the binaries (SHA256SUMS, hack/lib/toolcache.sh); a
# folder whose binaries no longer match them, or that has no record (built
# before the record existed: rebuilt once), is rebuilt rather than run.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/test/tools"
# shellcheck source=lib/toolcache.sh
. "$root/hack/lib/toolcache.sh"
key=$(cat "$tools"/k8s/go.mod "$tools"/k8s/go.sum "$tools"/etcd/go.mod "$tools"/etcd/go.sum \
	"$tools"/etcd/main.go "$tools"/kwok/go.mod "$tools"/kwok/go.sum | sha256sum | cut -c1-12)
k8s_version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$tools/k8s/go.mod")
parent=${FLEETDB_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetdb/tools}
bin="$parent/k8s-${k8s_version}-${key}"

want=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kwokctl)
complete() {
	for b in "${want[@]}"; do [ -x "$bin/$b" ] || return 1; done
}

if ! complete || ! toolcache_verify "$bin"; then
	mkdir -p "$parent"
	exec 9>"$parent/.lock"
	flock 9
	if ! toolcache_trusted toolchain "$bin" || ! complete; then
		tmp="$bin.tmp.$$"
		toolcache_remove "$parent" "$tmp"
		mkdir -p "$tmp"
		flags=(-trimpath -ldflags "-s -w")
		echo "toolchain: building control-plane binaries into $bin (first run takes ~15 minutes)" >&2
		start=$SECONDS
		(cd "$tools/etcd" && go build "${flags[@]}" -o "$tmp/etcd" .)
		(cd "$tools/kwok" && go build "${flags[@]}" -o "$tmp/" sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl)
		(cd "$tools/k8s" && go build "${flags[@]}" -o "$tmp/" \
			k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
			k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
		toolcache_seal "$tmp"
		toolcache_remove "$parent" "$bin"
		mv "$tmp" "$bin"
		echo "toolchain: built in $((SECONDS - start))s" >&2
	fi
fi
echo "$bin"
