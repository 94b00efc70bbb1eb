#!/usr/bin/env bash
# CloudNativePG, pinned in test/tools/cnpg/go.mod and taken from the Go module
# cache (no other download):
#
#   hack/cnpg.sh dir        print the folder of the pinned release's CRDs
#                           (the module's config/crd/bases)
#   hack/cnpg.sh version    print the pinned release (e.g. v1.30.0)
#   hack/cnpg.sh operator   print the operator's release manifest of that
#                           version (CRDs, RBAC, webhooks, the controller in
#                           cnpg-system), as the module ships it in releases/
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module=github.com/cloudnative-pg/cloudnative-pg

moddir() {
	(cd "$root/test/tools/cnpg" && GOFLAGS=-mod=mod go mod download -json "$module") |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

version() { awk -v m="$module" '$1=="require" && $2==m {print $3}' "$root/test/tools/cnpg/go.mod"; }

operator() {
	local v manifest
	v=$(version)
	manifest="$(moddir)/releases/cnpg-${v#v}.yaml"
	[ -f "$manifest" ] || { echo "cnpg: $manifest is not in the module" >&2; exit 1; }
	cat "$manifest"
}

case "${1:-}" in
dir) echo "$(moddir)/config/crd/bases" ;;
version) version ;;
operator) operator ;;
*)
	echo "usage: $0 dir|version|operator" >&2
	exit 2
	;;
esac
