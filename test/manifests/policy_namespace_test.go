package manifests

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// renderHubIn renders deploy/hub with its namespace: set to ns (what
// `kustomize edit set namespace ns` does there), from a copy of deploy/ in
// memory. It returns the objects and the rendered YAML.
func renderHubIn(t *testing.T, ns string) ([]*unstructuredObj, string) {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	root := path(t, "deploy")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		return mem.WriteFile(filepath.Join("/deploy", rel), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	k, err := mem.ReadFile("/deploy/hub/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^namespace: .*$`)
	if !line.Match(k) {
		t.Fatal("deploy/hub/kustomization.yaml sets no namespace:")
	}
	if err := mem.WriteFile("/deploy/hub/kustomization.yaml", line.ReplaceAll(k, []byte("namespace: "+ns))); err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/deploy/hub")
	if err != nil {
		t.Fatalf("kustomize build deploy/hub for namespace %s: %v", ns, err)
	}
	var objs []*unstructuredObj
	var all strings.Builder
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		all.Write(y)
		all.WriteString("---\n")
		o := &unstructuredObj{}
		if err := yaml.Unmarshal(y, o); err != nil {
			t.Fatal(err)
		}
		o.yaml = y
		objs = append(objs, o)
	}
	return objs, all.String()
}

type unstructuredObj struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	yaml []byte
}

// TestHubPoliciesFollowNamespace (issue 42, item 6): deploy/hub installed in
// another namespace binds its admission policies to that namespace's hub
// identity (the policies' CEL names the ServiceAccount; a policy left on
// fleetdb-system would bind no one there, silently). What they enforce for
// that identity on a real API server: test/integration TestHubPoliciesElsewhere.
func TestHubPoliciesFollowNamespace(t *testing.T) {
	for _, ns := range []string{"fleetdb-system", "db-operators"} {
		t.Run(ns, func(t *testing.T) {
			g := NewWithT(t)
			objs, all := renderHubIn(t, ns)
			identity := "'system:serviceaccount:" + ns + ":fleetdb-hub'"
			var policies []string
			bindings := 0
			for _, o := range objs {
				if o.Kind == "RoleBinding" {
					bindings++
					rb := decodeStrict(t, o.Metadata.Name, o.yaml).(*rbacv1.RoleBinding)
					for _, s := range rb.Subjects {
						g.Expect(s.Namespace).To(Equal(ns), "RoleBinding %s binds the hub of %s", rb.Name, ns)
					}
				}
				if o.Kind != "ValidatingAdmissionPolicy" {
					continue
				}
				p := decodeStrict(t, o.Metadata.Name, o.yaml).(*admissionregistrationv1.ValidatingAdmissionPolicy)
				for _, c := range p.Spec.MatchConditions {
					if strings.Contains(c.Expression, "request.userInfo.username") {
						policies = append(policies, p.Name)
						g.Expect(c.Expression).To(Equal("request.userInfo.username == "+identity), "policy %s binds the hub of %s", p.Name, ns)
					}
				}
			}
			g.Expect(bindings).To(BeNumerically(">", 0))
			g.Expect(policies).To(ConsistOf("fleetdb-hub-secrets", "fleetdb-hub-secret-bindings"),
				"the policies that bind the hub's identity")
			if ns != "fleetdb-system" {
				g.Expect(all).NotTo(ContainSubstring("fleetdb-system"), "deploy/hub rendered for %s names fleetdb-system", ns)
			}
		})
	}
}
