// Package manifests checks what fleetdb ships besides code: the kustomize
// bases under deploy/, the kind configs, the samples and the glue between them
// (Makefile, CI workflow, join script). The checks render and decode with the
// same libraries kubectl and kind use (kustomize's krusty, kind's config API,
// the Kubernetes API types with strict decoding), so a manifest that kubectl
// or kind would reject, or that drifts from the code, fails here first.
package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/repo"
)

// path is a file of the repository.
func path(t *testing.T, rel string) string {
	t.Helper()
	return filepath.Join(repo.RootT(t), filepath.FromSlash(rel))
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(path(t, rel))
	if err != nil {
		t.Fatalf("reading %s: %v", rel, err)
	}
	return string(b)
}

// scheme knows every kind fleetdb ships: the built-in ones, CRDs and fleetdb's own.
func scheme(t *testing.T) *k8sruntime.Scheme {
	t.Helper()
	s := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, fleetv1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			t.Fatalf("building the scheme: %v", err)
		}
	}
	return s
}

// decodeStrict decodes one YAML document into its typed object, failing on
// unknown kinds, unknown or duplicate fields: what kubectl's server-side
// field validation would reject.
func decodeStrict(t *testing.T, what string, doc []byte) client.Object {
	t.Helper()
	s := scheme(t)
	ser := json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{Yaml: true, Strict: true})
	obj, gvk, err := ser.Decode(doc, nil, nil)
	if err != nil {
		t.Fatalf("%s: decoding strictly: %v\n%s", what, err, doc)
	}
	cobj, ok := obj.(client.Object)
	if !ok {
		t.Fatalf("%s: %s is not an object", what, gvk)
	}
	cobj.GetObjectKind().SetGroupVersionKind(*gvk)
	return cobj
}

// render builds a kustomize base the way `kubectl apply -k` does and returns
// its objects, each decoded strictly into its Go type.
func render(t *testing.T, dir string) []client.Object {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), path(t, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []client.Object
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatalf("kustomize build %s: %s: %v", dir, r.CurId(), err)
		}
		objs = append(objs, decodeStrict(t, dir+": "+r.CurId().String(), y))
	}
	return objs
}

// splitYAML splits a multi-document YAML file into its non-empty documents.
func splitYAML(content string) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(content, -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// find returns the object of type T with that namespace and name.
func find[T client.Object](objs []client.Object, namespace, name string) (T, bool) {
	for _, o := range objs {
		if t, ok := o.(T); ok && o.GetNamespace() == namespace && o.GetName() == name {
			return t, true
		}
	}
	var zero T
	return zero, false
}

// all returns the objects of type T.
func all[T client.Object](objs []client.Object) []T {
	var out []T
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// mustFind fails the test unless the object exists.
func mustFind[T client.Object](t *testing.T, objs []client.Object, namespace, name string) T {
	t.Helper()
	o, ok := find[T](objs, namespace, name)
	if !ok {
		var zero T
		t.Fatalf("no %T %s/%s among %s", zero, namespace, name, describe(objs))
	}
	return o
}

func describe(objs []client.Object) string {
	var s []string
	for _, o := range objs {
		s = append(s, o.GetObjectKind().GroupVersionKind().Kind+" "+client.ObjectKeyFromObject(o).String())
	}
	return strings.Join(s, ", ")
}

// permission is one thing a role must (or may) allow.
type permission struct {
	group, resource, verb string
	// name, when set, is the object name the request is about.
	name string
}

// allows reports whether any rule grants p. It follows RBAC's own matching:
// "*" matches anything, resourceNames restrict to those names.
func allows(rules []rbacv1.PolicyRule, p permission) bool {
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			continue
		}
		if !matches(r.APIGroups, p.group) || !matches(r.Resources, p.resource) || !matches(r.Verbs, p.verb) {
			continue
		}
		if len(r.ResourceNames) > 0 && (p.name == "" || !slices.Contains(r.ResourceNames, p.name)) {
			continue
		}
		return true
	}
	return false
}

// allowsURL reports whether any rule grants verb on the non-resource URL.
func allowsURL(rules []rbacv1.PolicyRule, url, verb string) bool {
	for _, r := range rules {
		if matches(r.Verbs, verb) && slices.ContainsFunc(r.NonResourceURLs, func(u string) bool {
			return u == url || u == "*" || (strings.HasSuffix(u, "*") && strings.HasPrefix(url, strings.TrimSuffix(u, "*")))
		}) {
			return true
		}
	}
	return false
}

func matches(list []string, s string) bool {
	return slices.Contains(list, s) || slices.Contains(list, rbacv1.ResourceAll)
}

// expectNoWildcards fails on "*" anywhere in the rules, including wildcard
// suffixes of non-resource URLs and subresource wildcards such as "*/status".
func expectNoWildcards(g Gomega, what string, rules []rbacv1.PolicyRule) {
	for i, r := range rules {
		for field, values := range map[string][]string{
			"apiGroups": r.APIGroups, "resources": r.Resources, "verbs": r.Verbs,
			"resourceNames": r.ResourceNames, "nonResourceURLs": r.NonResourceURLs,
		} {
			for _, v := range values {
				g.Expect(v).NotTo(ContainSubstring("*"), "%s rule %d: wildcard in %s", what, i, field)
			}
		}
	}
}
