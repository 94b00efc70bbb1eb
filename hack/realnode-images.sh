#!/usr/bin/env bash
# Builds the CloudNativePG images of the real-node fleet, without a registry,
# and prints the folder that holds their archives (for `ctr images import`,
# hack/realnode.sh cnpg):
#
#   cnpg-operator.tar  the operator image, under the name its release manifest
#                      uses (ghcr.io/cloudnative-pg/cloudnative-pg:<version>):
#                      the static manager binary (cmd/manager of the module
#                      pinned in test/tools/cnpgoperator) at
#                      /operator/manager_<arch>, /manager linking to it, user
#                      65532, like CloudNativePG's Dockerfile
#   postgresql.tar     PostgreSQL from Debian's packages, under the name fleetdb
#                      renders for a Database whose spec.version is the Debian
#                      package's <major>.<minor>
#                      (ghcr.io/cloudnative-pg/postgresql:<major>.<minor>-system-trixie,
#                      member/cnpg.go CNPGImageTag); the files postgresql-image
#                      and postgresql-version hold that name and version
#                      (docs/realnodes.md says why the Debian minor and not
#                      fleetdb's pinned minor of the major):
#                      the package closure of postgresql-<major> unpacked with
#                      dpkg-deb (no maintainer scripts; without perl, locales,
#                      LLVM and postgresql-common's wrappers), the binaries on
#                      PATH, user postgres with uid 26 like CloudNativePG's
#                      postgres-containers images; libc-bin for its C.utf8
#                      locale, no LANG (initdb refused LANG=C.UTF-8 without it).
#                      It is also the image of fleetdb's backup and restore
#                      Jobs on the CloudNativePG backend (member/render.go
#                      clientImage: the operand image, as on a real fleet), so
#                      it holds what their scripts run besides psql, pg_dump,
#                      pg_dumpall and pg_restore: coreutils, sed, grep
#                      (member/backup_script.go, member/restore_script.go)
#   local-path-provisioner.tar, local-path-storage.yaml
#                      Rancher's local-path-provisioner (test/tools/localpath)
#                      and its manifest, helper pods on fleetdb.local/busybox:1:
#                      volumes PostgreSQL (uid 26) can write, which the
#                      kube-controller-manager's host-path provisioner does
#                      not give (folders 0750 for root, no fsGroup on hostPath)
#   release.yaml       the operator's release manifest shipped in the module
#                      (releases/cnpg-<version>.yaml), with the operator's
#                      imagePullPolicy IfNotPresent instead of Always
#
# Cached like hack/toolchain.sh, keyed by a hash of the pins and this script,
# with the hashes of its files recorded at the end of a build and checked on
# every reuse (SHA256SUMS, hack/lib/toolcache.sh): a folder that does not match
# them, or has no record (built before the record existed: rebuilt once), is
# rebuilt.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/test/tools"
# shellcheck source=lib/toolcache.sh
. "$root/hack/lib/toolcache.sh"
key=$(cat "$tools"/cnpgoperator/go.mod "$tools"/cnpgoperator/go.sum "$tools"/localpath/go.mod "$tools"/localpath/go.sum "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
cnpg_version=$(awk '($1=="require" && $2=="github.com/cloudnative-pg/cloudnative-pg") {print $3; exit} $1=="github.com/cloudnative-pg/cloudnative-pg" {print $2; exit}' "$tools/cnpgoperator/go.mod")
parent=${FLEETDB_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetdb/tools}
out="$parent/realnode-images-cnpg-${cnpg_version}-${key}"
want=(cnpg-operator.tar postgresql.tar postgresql-image postgresql-version release.yaml local-path-provisioner.tar local-path-storage.yaml)

complete() {
	for f in "${want[@]}"; do [ -s "$out/$f" ] || return 1; done
}

# closure prints the Debian packages the named ones need (Depends and
# Pre-Depends, recursively), leaving out those an image does not use.
closure() {
	local exclude=" locales locales-all postgresql-common postgresql-client-common ssl-cert debconf cdebconf
		libllvm14 libllvm15 libllvm16 perl perl-base perl-modules-5.36 adduser lsb-base sysvinit-utils
		init-system-helpers ucf sensible-utils dpkg install-info " p d
	local -A seen=()
	local level=() next=()
	for p in "$@"; do
		seen[$p]=1
		echo "$p"
		level+=("$p")
	done
	# One apt-cache call per level of the graph: one per package took minutes
	# on a loaded machine.
	while [ ${#level[@]} -gt 0 ]; do
		next=()
		while read -r d; do
			case "$exclude" in *[[:space:]]"$d"[[:space:]]*) continue ;; esac
			[ -z "${seen[$d]:-}" ] || continue
			seen[$d]=1
			echo "$d"
			next+=("$d")
		done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
			--no-replaces --no-enhances "${level[@]}" | sed -n 's/^ *|\{0,1\}\(Pre\)\{0,1\}Depends: \([^<][^ ]*\)$/\2/p')
		level=(${next[@]+"${next[@]}"})
	done
}

# Standard output carries one line, the folder (its callers read it as a
# path): whatever a build step prints goes to standard error.
exec 3>&1 1>&2
if ! complete || ! toolcache_verify "$out"; then
	BIN=$("$root/hack/realnode-tools.sh")
	mkdir -p "$parent"
	exec 9>"$parent/.lock-realnode-images"
	flock 9
	if ! toolcache_trusted realnode-images "$out" || ! complete; then
		tmp="$out.tmp.$$"
		toolcache_remove "$parent" "$tmp"
		mkdir -p "$tmp"
		trap 'toolcache_remove "$parent" "$tmp"' EXIT
		start=$SECONDS
		echo "realnode-images: building CloudNativePG $cnpg_version and PostgreSQL images into $out" >&2
		mod=$(cd "$tools/cnpgoperator" && GOFLAGS=-mod=mod go mod download -json "github.com/cloudnative-pg/cloudnative-pg@$cnpg_version" |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		# The manifest as released, but for the operator's pull policy: Always
		# would ask a registry this fleet does not have for the image that is
		# already on the node.
		sed 's/imagePullPolicy: Always$/imagePullPolicy: IfNotPresent/' \
			"$mod/releases/cnpg-${cnpg_version#v}.yaml" >"$tmp/release.yaml"
		operator_image=$(awk '$1=="image:" && $2 ~ /\/cloudnative-pg:/ {print $2; exit}' "$tmp/release.yaml")
		[ -n "$operator_image" ] || { echo "realnode-images: no operator image in the release manifest" >&2; exit 1; }

		# The operator image.
		rootfs="$tmp/rootfs-operator"
		mkdir -p "$rootfs/etc" "$rootfs/tmp"
		chmod 1777 "$rootfs/tmp"
		# Like its Dockerfile: /operator/manager_<arch>, and /manager a link to
		# it. The operator learns which architectures instances may run from
		# the files matching operator/manager_* (relative to its working
		# directory /; pkg/utils/discovery.go, v1.30.0): without them every
		# Cluster fails with "invalid architecture: amd64".
		arch=$(go env GOARCH)
		mkdir -p "$rootfs/operator"
		(cd "$tools/cnpgoperator" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$rootfs/operator/manager_$arch" \
			github.com/cloudnative-pg/cloudnative-pg/cmd/manager)
		ln -s "operator/manager_$arch" "$rootfs/manager"
		printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
		printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
		"$BIN/ociimage" -name "$operator_image" -rootfs "$rootfs" -out "$tmp/cnpg-operator.tar" \
			-entrypoint '["/manager"]' -user 65532:65532 -workdir /
		rm -rf "$rootfs"

		# The local-path-provisioner image and manifest (the manifest names the
		# image without a registry: the CRI looks it up as docker.io/...).
		lpp_version=$(awk '$1=="github.com/rancher/local-path-provisioner" {print $2; exit} $1=="require" && $2=="github.com/rancher/local-path-provisioner" {print $3; exit}' "$tools/localpath/go.mod")
		lpp=$(cd "$tools/localpath" && GOFLAGS=-mod=mod go mod download -json "github.com/rancher/local-path-provisioner@$lpp_version" |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		rootfs="$tmp/rootfs-local-path"
		mkdir -p "$rootfs/usr/bin" "$rootfs/etc" "$rootfs/tmp"
		chmod 1777 "$rootfs/tmp"
		(cd "$tools/localpath" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$rootfs/usr/bin/local-path-provisioner" \
			github.com/rancher/local-path-provisioner)
		lpp_image=$(awk '$1=="image:" && $2 ~ /local-path-provisioner:/ {print $2; exit}' "$lpp/deploy/local-path-storage.yaml")
		"$BIN/ociimage" -name "docker.io/$lpp_image" -rootfs "$rootfs" -out "$tmp/local-path-provisioner.tar" -env PATH=/usr/bin:/bin
		sed 's|image: busybox$|image: fleetdb.local/busybox:1|' "$lpp/deploy/local-path-storage.yaml" >"$tmp/local-path-storage.yaml"
		rm -rf "$rootfs"

		# The PostgreSQL image.
		major=$(apt-cache depends postgresql | sed -n 's/^ *Depends: postgresql-\([0-9][0-9]*\)$/\1/p' | head -1)
		[ -n "$major" ] || { apt-get update -qq >&2 && major=$(apt-cache depends postgresql | sed -n 's/^ *Depends: postgresql-\([0-9][0-9]*\)$/\1/p' | head -1); }
		[ -n "$major" ] || { echo "realnode-images: Debian's 'postgresql' package names no postgresql-N" >&2; exit 1; }
		debs="$tmp/debs"
		mkdir -p "$debs"
		# coreutils, sed and grep: the backup and restore Jobs' scripts (above).
		mapfile -t pkgs < <(closure "postgresql-$major" dash libc-bin libsasl2-modules libldap-common coreutils sed grep)
		(cd "$debs" && apt-get download -qq "${pkgs[@]}" >&2)
		# The version the image runs is the downloaded package's, e.g.
		# 15.20-0+deb12u1 -> 15.20: the image is named for it, so that the
		# immutable tag fleetdb renders for spec.version "15.20" names exactly
		# what runs (not fleetdb's pinned minor of the major, member/cnpg.go).
		pg_version=$(dpkg-deb -f "$debs"/postgresql-"$major"_*.deb Version | sed -n 's/^\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
		[ -n "$pg_version" ] || { echo "realnode-images: cannot read the version of postgresql-$major's package" >&2; exit 1; }
		pg_image="ghcr.io/cloudnative-pg/postgresql:$pg_version-system-trixie"
		rootfs="$tmp/rootfs-postgresql"
		mkdir -p "$rootfs"
		for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$rootfs"; done
		rm -rf "$debs"
		# The JIT provider needs LLVM, which the image leaves out: PostgreSQL
		# then runs without JIT.
		rm -f "$rootfs/usr/lib/postgresql/$major/lib/llvmjit"*
		rm -rf "$rootfs/usr/lib/postgresql/$major/lib/bitcode" "$rootfs/usr/share/doc" "$rootfs/usr/share/man" "$rootfs/usr/share/locale"
		[ -e "$rootfs/bin/sh" ] || ln -s dash "$rootfs/bin/sh"
		mkdir -p "$rootfs/tmp" "$rootfs/var/lib/postgresql" "$rootfs/run/postgresql" "$rootfs/etc"
		chmod 1777 "$rootfs/tmp"
		printf 'root:x:0:0:root:/root:/bin/sh\npostgres:x:26:26:PostgreSQL administrator:/var/lib/postgresql:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$rootfs/etc/passwd"
		printf 'root:x:0:\npostgres:x:26:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
		chown 26:26 "$rootfs/var/lib/postgresql" "$rootfs/run/postgresql"
		ldconfig -r "$rootfs"
		"$BIN/ociimage" -name "$pg_image" -rootfs "$rootfs" -out "$tmp/postgresql.tar" \
			-user 26 -env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/lib/postgresql/$major/bin"
		echo "$major" >"$tmp/postgresql-major"
		echo "$pg_version" >"$tmp/postgresql-version"
		echo "$pg_image" >"$tmp/postgresql-image"
		rm -rf "$rootfs"

		toolcache_seal "$tmp"
		toolcache_remove "$parent" "$out"
		mv "$tmp" "$out"
		trap - EXIT
		echo "realnode-images: built in $((SECONDS - start))s" >&2
	fi
fi
echo "$out" >&3
