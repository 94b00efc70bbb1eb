#!/usr/bin/env bash
# Builds the pinned Jaeger (v2, github.com/jaegertracing/jaeger/cmd/jaeger,
# pinned by test/tools/jaeger/go.mod) and prints the path of the binary. Run
# without arguments it is Jaeger "all in one" with in-memory storage: OTLP on
# 127.0.0.1:4317 (gRPC) and :4318 (HTTP), the query API and UI on :16686.
#
# Like hack/toolchain.sh, the binary lives in the user's cache directory
# (FLEETDB_TOOLS_DIR overrides the parent folder), in a folder keyed by a hash
# of the pin, so an unchanged pin builds nothing.
#
# Note: Jaeger's web UI is a git submodule that the Go module does not carry,
# so this binary serves a placeholder page at / ; the query API
# (/api/services, /api/traces?service=..., /api/traces/<id>) is complete.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod="$root/test/tools/jaeger"
key=$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-12)
version=$(awk '$1=="github.com/jaegertracing/jaeger" {print $2}' "$mod/go.mod")
parent=${FLEETDB_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetdb/tools}
bin="$parent/jaeger-${version}-${key}"

if [ ! -x "$bin/jaeger" ]; then
	mkdir -p "$parent"
	exec 9>"$parent/.lock"
	flock 9
	if [ ! -x "$bin/jaeger" ]; then
		tmp="$bin.tmp.$$"
		rm -rf "$tmp"
		mkdir -p "$tmp"
		echo "jaeger: building Jaeger $version into $bin (first run takes a few minutes)" >&2
		start=$SECONDS
		(cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$tmp/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger)
		rm -rf "$bin"
		mv "$tmp" "$bin"
		echo "jaeger: built in $((SECONDS - start))s" >&2
	fi
fi
echo "$bin/jaeger"
