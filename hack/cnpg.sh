#!/usr/bin/env bash
# CloudNativePG, pinned in test/tools/cnpg/go.mod and taken from the Go module
# cache (no other download):
#
#   hack/cnpg.sh dir        print the module's folder (CRDs in config/crd/bases)
#   hack/cnpg.sh operator   print the operator's manifest for that version: the
#                           module's config/default (CRDs, RBAC, webhooks, the
#                           controller in cnpg-system) built with kustomize, the
#                           image set to the release's (the module ships release
#                           manifests only up to 1.23 under releases/)
#
# KUBECTL (default kubectl) runs `kubectl kustomize`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module=github.com/cloudnative-pg/cloudnative-pg

dir() {
	(cd "$root/test/tools/cnpg" && GOFLAGS=-mod=mod go mod download -json "$module") |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

operator() {
	local src version
	src=$(dir)
	version=$(awk -v m="$module" '$1=="require" && $2==m {print $3}' "$root/test/tools/cnpg/go.mod")
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	# kustomize reads bases inside the kustomization's root only: copy the tree.
	cp -r "$src/config" "$tmp/config"
	chmod -R u+w "$tmp"
	cat >"$tmp/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- config/default
images:
- name: controller
  newName: ghcr.io/cloudnative-pg/cloudnative-pg
  newTag: "${version#v}"
YAML
	"${KUBECTL:-kubectl}" kustomize "$tmp"
}

case "${1:-}" in
dir) dir ;;
operator) operator ;;
*)
	echo "usage: $0 dir|operator" >&2
	exit 2
	;;
esac
