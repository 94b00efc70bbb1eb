#!/usr/bin/env bash
# Builds what a real-node member of the local fleet runs (hack/realnode.sh)
# and prints the folder that holds it:
#
#   kubelet, kube-proxy      from the k8s.io/kubernetes version of the control plane
#                            (test/tools/k8snode, same pins and replaces as
#                            test/tools/k8s: Go's build cache is shared with
#                            hack/toolchain.sh)
#   containerd, ctr,         containerd 2.x from its Go module (test/tools/containerd);
#   containerd-shim-runc-v2  Kubernetes 1.36 needs containerd 2, Debian's is 1.x
#   ociimage                 writes an image archive from a folder (test/tools/ociimage)
#   coredns                  the members' cluster DNS: CoreDNS from its Go module with
#                            the plugins test/tools/coredns/main.go links
#   pause                    the pause program from the Kubernetes source (build/pause)
#   images/*.tar             image archives for `ctr images import`:
#                              pause.tar    registry.k8s.io/pause:3.10.2 (containerd
#                                           2.4's default sandbox image)
#                              busybox.tar  fleetdb.local/busybox:1 (Debian's static
#                                           busybox, every applet; smoke pods and
#                                           local-path-provisioner's helper pods)
#                              coredns.tar  fleetdb.local/coredns:<version> (the
#                                           coredns binary, user 65532; file
#                                           coredns-image holds the name)
#
# runc, the CNI plugins and iptables come from Debian's packages, installed
# here when missing (apt-get; the scripts run as root).
#
# Like hack/toolchain.sh, the folder is keyed by a hash of the pin files and
# of this script, lives in the user's cache directory and FLEETDB_TOOLS_DIR
# overrides its parent folder; an unchanged pin builds nothing. A build ends by
# recording the hashes of its files (SHA256SUMS, hack/lib/toolcache.sh); a
# folder whose files no longer match them, or that has no record (built before
# the record existed: rebuilt once), is rebuilt rather than run.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/test/tools"
# shellcheck source=lib/toolcache.sh
. "$root/hack/lib/toolcache.sh"
key=$(cat "$tools"/k8snode/go.mod "$tools"/k8snode/go.sum "$tools"/containerd/go.mod "$tools"/containerd/go.sum \
	"$tools"/ociimage/go.mod "$tools"/ociimage/main.go "$tools"/coredns/go.mod "$tools"/coredns/go.sum "$tools"/coredns/main.go \
	"${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
k8s_version=$(awk '$1=="k8s.io/kubernetes" {print $2; exit}' "$tools/k8snode/go.mod")
parent=${FLEETDB_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetdb/tools}
bin="$parent/realnode-${k8s_version}-${key}"

debs=(runc containernetworking-plugins iptables busybox-static)
want=(kubelet kube-proxy containerd containerd-shim-runc-v2 ctr ociimage pause coredns coredns-image images/pause.tar images/busybox.tar images/coredns.tar)

complete() {
	for b in "${want[@]}"; do [ -s "$bin/$b" ] || return 1; done
}

# debs_present is true when every Debian package above is installed.
debs_present() {
	local p
	for p in "${debs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || return 1
	done
}

if ! debs_present; then
	echo "realnode-tools: installing Debian packages: ${debs[*]}" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debs[@]}" >&2
fi

moddir() {
	(cd "$tools/$1" && GOFLAGS=-mod=mod go mod download -json "$2") |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# Standard output carries one line, the folder (its callers read it as a
# path): whatever a build step prints goes to standard error.
exec 3>&1 1>&2
if ! complete || ! toolcache_verify "$bin"; then
	mkdir -p "$parent"
	exec 9>"$parent/.lock-realnode"
	flock 9
	if ! toolcache_trusted realnode-tools "$bin" || ! complete; then
		tmp="$bin.tmp.$$"
		toolcache_remove "$parent" "$tmp"
		mkdir -p "$tmp/images"
		trap 'toolcache_remove "$parent" "$tmp"' EXIT
		flags=(-trimpath -ldflags "-s -w")
		echo "realnode-tools: building node binaries into $bin (first run takes ~10 minutes)" >&2
		start=$SECONDS
		(cd "$tools/ociimage" && CGO_ENABLED=0 go build "${flags[@]}" -o "$tmp/ociimage" .)
		# containerd's own static release build: no cgo, no btrfs/devmapper/zfs
		# snapshotters (overlayfs is the one the nodes use).
		(cd "$tools/containerd" && CGO_ENABLED=0 go build "${flags[@]}" \
			-tags "urfave_cli_no_docs osusergo netgo static_build no_btrfs no_devmapper no_zfs" -o "$tmp/" \
			github.com/containerd/containerd/v2/cmd/containerd \
			github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
			github.com/containerd/containerd/v2/cmd/ctr)
		# The version a node reports (kubectl get nodes), as Kubernetes' own
		# build sets it (hack/lib/version.sh).
		minor=${k8s_version#v*.}
		minor=${minor%%.*}
		vflags="-X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1"
		vflags="$vflags -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
		(cd "$tools/k8snode" && go build -trimpath -ldflags "-s -w $vflags" -o "$tmp/" \
			k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
		k8s=$(moddir k8snode "k8s.io/kubernetes@$k8s_version")
		# The flags of build/pause/Makefile (CFLAGS), with the version it tags.
		pause_tag=$(awk '$1=="TAG" {print $3}' "$k8s/build/pause/Makefile")
		gcc -Os -Wall -Werror -static -DVERSION="v$pause_tag-fleetdb" -o "$tmp/pause" "$k8s/build/pause/linux/pause.c"

		rootfs="$tmp/rootfs"
		mkdir -p "$rootfs"
		install -m 0755 "$tmp/pause" "$rootfs/pause"
		"$tmp/ociimage" -name "registry.k8s.io/pause:$pause_tag" -rootfs "$rootfs" -out "$tmp/images/pause.tar" \
			-entrypoint '["/pause"]' -user 65535:65535
		rm -rf "$rootfs"
		mkdir -p "$rootfs/bin" "$rootfs/tmp" "$rootfs/etc"
		chmod 1777 "$rootfs/tmp"
		install -m 0755 /bin/busybox "$rootfs/bin/busybox"
		# Every applet (helper pods run shell scripts with mkdir, rm, ...).
		for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$rootfs/bin/$a"; done
		printf 'root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' >"$rootfs/etc/passwd"
		printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
		"$tmp/ociimage" -name fleetdb.local/busybox:1 -rootfs "$rootfs" -out "$tmp/images/busybox.tar" \
			-cmd '["/bin/sh"]' -env PATH=/bin
		rm -rf "$rootfs"

		# Cluster DNS: CoreDNS with the plugins a member's kube-dns uses
		# (test/tools/coredns/main.go), as a static binary like its releases.
		coredns_version=$(awk '$1=="github.com/coredns/coredns" {print $2; exit} $1=="require" && $2=="github.com/coredns/coredns" {print $3; exit}' "$tools/coredns/go.mod")
		(cd "$tools/coredns" && CGO_ENABLED=0 go build "${flags[@]}" -o "$tmp/coredns" .)
		mkdir -p "$rootfs/etc"
		install -m 0755 "$tmp/coredns" "$rootfs/coredns"
		printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' >"$rootfs/etc/passwd"
		printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
		echo "fleetdb.local/coredns:${coredns_version#v}" >"$tmp/coredns-image"
		"$tmp/ociimage" -name "$(cat "$tmp/coredns-image")" -rootfs "$rootfs" -out "$tmp/images/coredns.tar" \
			-entrypoint '["/coredns"]' -user 65532:65532
		rm -rf "$rootfs"

		toolcache_seal "$tmp"
		toolcache_remove "$parent" "$bin"
		mv "$tmp" "$bin"
		trap - EXIT
		echo "realnode-tools: built in $((SECONDS - start))s" >&2
	fi
fi
echo "$bin" >&3
