package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// HubPolicies are the admission policies of deploy/hub that the hub's API
// server enforces itself (no webhook), installed on every harness hub.
var HubPolicies = []string{"deploy/hub/deletion_protection.yaml", "deploy/hub/backend_record.yaml"}

// ApplyManifests creates the objects of the YAML files (paths relative to the
// repository root) with c; objects that exist already are left as they are.
func ApplyManifests(ctx context.Context, c client.Client, paths ...string) error {
	for _, p := range paths {
		objs, err := ReadManifests(p)
		if err != nil {
			return err
		}
		for _, o := range objs {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := c.Create(cctx, o)
			cancel()
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating %s %s from %s: %w", o.GetKind(), o.GetName(), p, err)
			}
		}
	}
	return nil
}

// ReadManifests decodes the YAML documents of a file relative to the
// repository root (an absolute path is read as it is).
func ReadManifests(path string) ([]*unstructured.Unstructured, error) {
	full := path
	if !filepath.IsAbs(path) {
		full = filepath.Join(RepoRoot(), path)
	}
	data, err := os.ReadFile(full)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---\n") {
		obj := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", path, err)
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out, nil
}
