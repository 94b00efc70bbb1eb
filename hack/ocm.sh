#!/usr/bin/env bash
# Open Cluster Management's work agent, fleetdb's peer in `make bench` (test/bench -peer ocm).
#
#   hack/ocm.sh    build the pinned work agent (open-cluster-management.io/ocm cmd/work,
#                  pinned by test/tools/ocm/go.mod) and print its folder: the binary
#                  `work` and, under crds/, the ManifestWork (hub) and AppliedManifestWork
#                  (member) CRDs of the open-cluster-management.io/api version it requires
#
# Like hack/jaeger.sh, it lives in the user's cache directory (FLEETDB_TOOLS_DIR
# overrides the parent folder), in a folder keyed by a hash of the pin, built
# under a lock, so an unchanged pin builds nothing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod="$root/test/tools/ocm"
parent=${FLEETDB_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetdb/tools}

key=$({ grep -v '^//' "$mod/go.mod"; cat "$mod/go.sum"; } | sha256sum | cut -c1-12)
version=$(awk '$1=="open-cluster-management.io/ocm" {print $2}' "$mod/go.mod")
dir="$parent/ocm-work-${version}-${key}"
if [ ! -x "$dir/work" ]; then
	mkdir -p "$parent"
	exec 9>"$parent/.lock"
	flock 9
	if [ ! -x "$dir/work" ]; then
		tmp="$dir.tmp.$$"
		rm -rf "$tmp"
		mkdir -p "$tmp/crds"
		echo "ocm: building the work agent $version into $dir (first run takes a few minutes)" >&2
		start=$SECONDS
		(cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$tmp/work" open-cluster-management.io/ocm/cmd/work)
		api=$(cd "$mod" && go list -m -f '{{.Dir}}' open-cluster-management.io/api)
		cp "$api"/work/v1/0000_00_work.open-cluster-management.io_manifestworks.crd.yaml \
			"$api"/work/v1/0000_01_work.open-cluster-management.io_appliedmanifestworks.crd.yaml "$tmp/crds/"
		chmod -R u+w "$tmp"
		rm -rf "$dir"
		mv "$tmp" "$dir"
		echo "ocm: built in $((SECONDS - start))s" >&2
	fi
fi
echo "$dir"
