#!/usr/bin/env bash
# Jaeger for `make run TRACING=1` (hack/run.sh).
#
#   hack/jaeger.sh      build the pinned Jaeger (v2, github.com/jaegertracing/jaeger/cmd/jaeger,
#                       pinned by test/tools/jaeger/go.mod) and print the path of the binary
#   hack/jaeger.sh ui   unpack the pinned Jaeger web UI (test/tools/jaeger/ui-version) and
#                       print its folder; exits 1 with the reason on stderr when it cannot
#
# run.sh starts the binary with test/tools/jaeger/config.yaml: in-memory
# storage, OTLP on 127.0.0.1:4317 (gRPC) and :4318 (HTTP), the query API and
# the UI (JAEGER_UI_ASSETS, the folder `ui` prints) on 127.0.0.1:16686.
# Jaeger's Go module does not carry the web UI (a git submodule built with
# npm); without the folder Jaeger serves a placeholder page at / and the query
# API (/api/services, /api/traces?service=..., /api/traces/<id>) is the same.
#
# Like hack/toolchain.sh, both live in the user's cache directory
# (FLEETDB_TOOLS_DIR overrides the parent folder), in folders keyed by a hash
# of their pin, built under a lock, so an unchanged pin builds nothing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod="$root/test/tools/jaeger"
parent=${FLEETDB_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetdb/tools}

lock() {
	mkdir -p "$parent"
	exec 9>"$parent/.lock"
	flock 9
}

# scratch makes a fresh folder next to $1 to build into, named in $tmp (the
# caller's local), so that a build cut short never leaves a half-made $1.
scratch() {
	tmp="$1.tmp.$$"
	rm -rf "$tmp"
	mkdir -p "$tmp"
}

binary() {
	local key version bin tmp start
	# The comment lines of go.mod are not part of the key.
	key=$({ grep -v '^//' "$mod/go.mod"; cat "$mod/go.sum"; } | sha256sum | cut -c1-12)
	version=$(awk '$1=="github.com/jaegertracing/jaeger" {print $2}' "$mod/go.mod")
	bin="$parent/jaeger-${version}-${key}"
	if [ ! -x "$bin/jaeger" ]; then
		lock
		if [ ! -x "$bin/jaeger" ]; then
			scratch "$bin"
			echo "jaeger: building Jaeger $version into $bin (first run takes a few minutes)" >&2
			start=$SECONDS
			(cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$tmp/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger)
			rm -rf "$bin"
			mv "$tmp" "$bin"
			echo "jaeger: built in $((SECONDS - start))s" >&2
		fi
	fi
	echo "$bin/jaeger"
}

# ui unpacks the production build of Jaeger's web UI that the Go module named
# in test/tools/jaeger/ui-version ships (gzipped files under public/): the
# module comes through `go mod download` (the Go module proxy and checksum
# database, as any Go dependency), its hash must be the pinned one.
ui() {
	local pin="$mod/ui-version" key ui_mod ui_modver ui_sum ui_version dir tmp json src sum f rel start
	field() { awk -v k="$1" '$1==k {print $2}' "$pin"; }
	ui_mod=$(field module)
	ui_modver=$(field version)
	ui_sum=$(field sum)
	ui_version=$(field ui)
	key=$(grep -v '^#' "$pin" | sha256sum | cut -c1-12)
	dir="$parent/jaeger-ui-${ui_version}-${key}"
	if [ -f "$dir/index.html" ]; then
		echo "$dir"
		return
	fi
	lock
	if [ ! -f "$dir/index.html" ]; then
		scratch "$dir"
		echo "jaeger: unpacking Jaeger UI $ui_version ($ui_mod@$ui_modver) into $dir" >&2
		start=$SECONDS
		# Outside any module (in $tmp), whatever GOFLAGS or go.work say.
		if ! json=$(cd "$tmp" && GOFLAGS='' GOWORK=off go mod download -json "$ui_mod@$ui_modver" 2>"$tmp.err"); then
			echo "jaeger: cannot download the Jaeger UI: $({ printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Error": "\(.*\)",*$/\1/p'; cat "$tmp.err"; } | head -1)" >&2
			rm -rf "$tmp" "$tmp.err"
			return 1
		fi
		rm -f "$tmp.err"
		src=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
		sum=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",*$/\1/p')
		if [ "$sum" != "$ui_sum" ]; then
			rm -rf "$tmp"
			echo "jaeger: $ui_mod@$ui_modver has hash $sum, test/tools/jaeger/ui-version pins $ui_sum" >&2
			return 1
		fi
		if [ ! -f "$src/public/index.html" ]; then
			rm -rf "$tmp"
			echo "jaeger: $ui_mod@$ui_modver has no public/index.html" >&2
			return 1
		fi
		while IFS= read -r -d '' f; do
			rel=${f#"$src/public/"}
			mkdir -p "$tmp/$(dirname "$rel")"
			if ! gzip -dc "$f" >"$tmp/$rel" 2>/dev/null; then
				cp "$f" "$tmp/$rel" # not gzipped
			fi
		done < <(find "$src/public" -type f -print0)
		chmod -R u+w "$tmp"
		rm -rf "$dir"
		mv "$tmp" "$dir"
		echo "jaeger: unpacked the UI in $((SECONDS - start))s" >&2
	fi
	echo "$dir"
}

case "${1:-}" in
"") binary ;;
ui) ui ;;
*)
	echo "usage: hack/jaeger.sh [ui]" >&2
	exit 2
	;;
esac
