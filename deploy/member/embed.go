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

// Render builds the kustomization and returns its objects in kustomize's
// order (the Namespace first).
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
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}
