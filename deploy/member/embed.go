// Package member embeds deploy/member, the hub's identity inside a member
// cluster, and renders it with kustomize's own library, so that
// `kubectl fleetdb join` installs exactly what `kubectl apply -k
// deploy/member` would, from a binary that needs no checkout.
package member

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

//go:embed *.yaml
var manifests embed.FS

// Names of the objects the kustomization creates that join and unjoin use.
const (
	// Namespace holds the identity in the member.
	Namespace = "fleetdb-system"
	// ServiceAccount is the hub's identity in the member.
	ServiceAccount = "fleetdb-hub-agent"
	// TokenSecret is the long-lived token Secret of ServiceAccount.
	TokenSecret = "fleetdb-hub-agent-token"
)

// installOrder ranks deploy/member's kinds in the order join applies them:
// the admission policies that confine the identity before anything that
// grants it rights, and the token last, so that a join cut short never
// leaves a token that the policies do not guard. unjoin removes them in the
// reverse order (token and bindings first, policies last) for the same
// reason.
var installOrder = map[string]int{
	"Namespace":                        0,
	"ValidatingAdmissionPolicy":        1,
	"ValidatingAdmissionPolicyBinding": 2,
	"ServiceAccount":                   3,
	"ClusterRole":                      4,
	"ClusterRoleBinding":               5,
	"Secret":                           6,
}

// Render builds the kustomization and returns its objects in install
// order (installOrder: the Namespace first, then the admission policies,
// the token last); delete them in the reverse order.
func Render() ([]*unstructured.Unstructured, error) {
	mem := filesys.MakeFsInMemory()
	const dir = "/member"
	err := fs.WalkDir(manifests, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := manifests.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join(dir, p), b)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the embedded deploy/member: %w", err)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, dir)
	if err != nil {
		return nil, fmt.Errorf("building deploy/member: %w", err)
	}
	out := make([]*unstructured.Unstructured, 0, resMap.Size())
	for _, r := range resMap.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("deploy/member: %w", err)
		}
		u := &unstructured.Unstructured{Object: m}
		if _, known := installOrder[u.GetKind()]; !known {
			return nil, fmt.Errorf("deploy/member: %s %s has no place in the install order", u.GetKind(), u.GetName())
		}
		out = append(out, u)
	}
	slices.SortStableFunc(out, func(a, b *unstructured.Unstructured) int {
		return installOrder[a.GetKind()] - installOrder[b.GetKind()]
	})
	return out, nil
}
