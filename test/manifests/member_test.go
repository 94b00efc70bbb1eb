package manifests

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

const (
	agentName   = "fleetdb-hub-agent"
	agentSecret = "fleetdb-hub-agent-token"
)

// secretRole holds the hub's Secret rights; the hub binds it by a RoleBinding
// in each managed namespace (member.SecretAccess), never cluster-wide.
var secretRole = member.SecretAccessRole

// secretVerbs are secretRole's grants, its only ones: Secrets, and the reads
// of ConfigMaps and Jobs (issue 42, item 3: never cluster-wide).
var secretVerbs = map[string][]string{"secrets": manage, "configmaps": read, "batch/jobs": read}

var read = []string{"get", "list", "watch"}

// rbacRules are the agent role's only RBAC rules: creating (and reading) a
// RoleBinding, and binding secretRole alone (the admission policy holds the
// RoleBinding to managed namespaces, this roleRef and the identity itself).
var rbacRules = []rbacv1.PolicyRule{
	{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"rolebindings"}, Verbs: []string{"get", "create"}},
	{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, ResourceNames: []string{member.SecretAccessRole}, Verbs: []string{"bind"}},
}

// resourceVerbs is everything the hub's identity in a member may do, and all
// of it is needed: fleetdb's objects in any namespace, the namespace itself
// only created.
var resourceVerbs = map[string][]string{
	"namespaces": {"get", "create"},
	// Written anywhere the admission policy allows, read only through
	// secretRole (per managed namespace).
	"configmaps":                  {"create", "update", "patch", "delete"},
	"services":                    manage,
	"persistentvolumeclaims":      manage,
	"apps/statefulsets":           manage,
	"policy/poddisruptionbudgets": manage,
	"postgresql.cnpg.io/clusters": manage,
	// Credential rotation Jobs are created and, once done, deleted (read
	// through secretRole).
	"batch/jobs": {"create", "delete"},
}

var manage = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// nonResourceVerbs are the URLs the registry's probe reads.
var nonResourceVerbs = map[string][]string{"/readyz": {"get"}, "/version": {"get"}}

// kindResources maps the kinds the hub writes into members to resourceVerbs keys.
var kindResources = map[string]string{
	"Namespace":             "namespaces",
	"Secret":                "secrets",
	"ConfigMap":             "configmaps",
	"Service":               "services",
	"PersistentVolumeClaim": "persistentvolumeclaims",
	"StatefulSet":           "apps/statefulsets",
	"PodDisruptionBudget":   "policy/poddisruptionbudgets",
	"Cluster":               "postgresql.cnpg.io/clusters",
	"Job":                   "batch/jobs",
}

func groupResource(key string) (group, res string) {
	if g, r, ok := strings.Cut(key, "/"); ok {
		return g, r
	}
	return "", key
}

func TestMemberBase(t *testing.T) {
	objs := render(t, "deploy/member")

	t.Run("identity", func(t *testing.T) {
		g := NewWithT(t)
		mustFind[*corev1.Namespace](t, objs, "", hubNamespace)
		mustFind[*corev1.ServiceAccount](t, objs, hubNamespace, agentName)
		g.Expect(boundClusterRoles(objs, hubNamespace, agentName)).To(ConsistOf(agentName))
		g.Expect(all[*rbacv1.RoleBinding](objs)).To(BeEmpty(), "the member identity has no namespaced grants")
		g.Expect(all[*rbacv1.Role](objs)).To(BeEmpty())

		s := mustFind[*corev1.Secret](t, objs, hubNamespace, agentSecret)
		g.Expect(s.Type).To(Equal(corev1.SecretTypeServiceAccountToken))
		g.Expect(s.Annotations).To(HaveKeyWithValue(corev1.ServiceAccountNameKey, agentName))
		g.Expect(s.Data).To(BeEmpty(), "the member's token controller fills the token in")
	})

	t.Run("least privilege", func(t *testing.T) {
		g := NewWithT(t)
		roles := all[*rbacv1.ClusterRole](objs)
		g.Expect(roles).To(HaveLen(2))
		role := mustFind[*rbacv1.ClusterRole](t, objs, "", agentName)
		expectNoWildcards(g, "member ClusterRole", role.Rules)
		var rules, rbacOnes []rbacv1.PolicyRule
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, rbacv1.GroupName) {
				rbacOnes = append(rbacOnes, r)
			} else {
				rules = append(rules, r)
			}
		}
		g.Expect(rbacOnes).To(ConsistOf(rbacRules), "the member ClusterRole's RBAC rules: the Secret role's binding only")
		expectNoEscalation(g, "member ClusterRole", rules)
		g.Expect(allows(role.Rules, permission{resource: "secrets", verb: "get"})).To(BeFalse(), "no Secret rights cluster-wide")

		secrets := mustFind[*rbacv1.ClusterRole](t, objs, "", secretRole)
		expectNoWildcards(g, "member Secret role", secrets.Rules)
		expectNoEscalation(g, "member Secret role", secrets.Rules)
		for i, r := range secrets.Rules {
			g.Expect(r.APIGroups).To(HaveLen(1), "Secret role rule %d", i)
			for _, res := range r.Resources {
				key := res
				if r.APIGroups[0] != "" {
					key = r.APIGroups[0] + "/" + res
				}
				g.Expect(secretVerbs).To(HaveKey(key), "Secret role rule %d", i)
				g.Expect(secretVerbs[key]).To(ContainElements(r.Verbs), "Secret role rule %d", i)
			}
		}
		for key, verbs := range secretVerbs {
			grp, res := groupResource(key)
			for _, v := range verbs {
				g.Expect(allows(secrets.Rules, permission{group: grp, resource: res, verb: v})).To(BeTrue(), "member Secret role: %s %s", v, key)
			}
		}
		for _, v := range manage {
			g.Expect(allows(secrets.Rules, permission{resource: "secrets", verb: v})).To(BeTrue(), "member Secret role: %s secrets", v)
		}

		for i, r := range rules {
			g.Expect(r.ResourceNames).To(BeEmpty(), "rule %d: fleetdb's objects have any name", i)
			if len(r.NonResourceURLs) > 0 {
				g.Expect(r.APIGroups).To(BeEmpty(), "rule %d mixes URLs and resources", i)
				g.Expect(r.Resources).To(BeEmpty(), "rule %d mixes URLs and resources", i)
				for _, u := range r.NonResourceURLs {
					g.Expect(nonResourceVerbs).To(HaveKey(u), "rule %d: URL %s is not needed", i, u)
					g.Expect(nonResourceVerbs[u]).To(ContainElements(r.Verbs), "rule %d: verbs on %s", i, u)
				}
				continue
			}
			for _, grp := range r.APIGroups {
				for _, res := range r.Resources {
					key := res
					if grp != "" {
						key = grp + "/" + res
					}
					g.Expect(resourceVerbs).To(HaveKey(key), "rule %d: %s is not a kind fleetdb manages", i, key)
					g.Expect(resourceVerbs[key]).To(ContainElements(r.Verbs), "rule %d: verbs on %s", i, key)
				}
			}
		}
		// ... and everything listed is granted.
		for key, verbs := range resourceVerbs {
			grp, res := groupResource(key)
			for _, v := range verbs {
				g.Expect(allows(role.Rules, permission{group: grp, resource: res, verb: v})).To(BeTrue(), "member ClusterRole: %s %s", v, key)
			}
		}
		for u, verbs := range nonResourceVerbs {
			for _, v := range verbs {
				g.Expect(allowsURL(role.Rules, u, v)).To(BeTrue(), "member ClusterRole: %s %s", v, u)
			}
		}
		// Things the hub must never be able to do in a member.
		for _, p := range []permission{
			{resource: "namespaces", verb: "delete"},
			{resource: "namespaces", verb: "update"},
			{resource: "namespaces", verb: "list"},
			{resource: "pods", verb: "get"},
			{resource: "configmaps", verb: "get"},
			{resource: "configmaps", verb: "list"},
			{group: "batch", resource: "jobs", verb: "list"},
			{resource: "nodes", verb: "list"},
			{resource: "serviceaccounts", verb: "create"},
			{group: "apps", resource: "deployments", verb: "create"},
			{group: "apps", resource: "statefulsets/status", verb: "update"},
		} {
			g.Expect(allows(role.Rules, p)).To(BeFalse(), "member ClusterRole must not allow %s %s (group %q)", p.verb, p.resource, p.group)
		}
	})

	// The ClusterRole covers what the hub's code really writes: render a
	// Database of each engine as the hub does and check every kind.
	t.Run("covers member.Render", func(t *testing.T) {
		g := NewWithT(t)
		role := mustFind[*rbacv1.ClusterRole](t, objs, "", agentName)
		secrets := mustFind[*rbacv1.ClusterRole](t, objs, "", secretRole)
		for _, engine := range []fleetv1alpha1.Engine{fleetv1alpha1.EnginePostgres, fleetv1alpha1.EngineMySQL, "postgres-on-statefulset"} {
			backend := fleetv1alpha1.Backend("")
			if engine == "postgres-on-statefulset" {
				engine, backend = fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendStatefulSet
			}
			db := &fleetv1alpha1.Database{
				ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders", UID: types.UID("0f3c1a52-2b1e-4c55-9a43-8d1b7c3e9f10"), Generation: 1},
				Spec: fleetv1alpha1.DatabaseSpec{
					Engine: engine, Backend: backend, Replicas: 3, Storage: fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
					Placement: fleetv1alpha1.PlacementSpec{ClusterNames: []string{"member-1"}},
				},
			}
			rendered, err := member.Render(member.Params{
				Database: db, Cluster: "member-1",
				Credentials: map[string][]byte{member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte("secret-pw")},
			})
			g.Expect(err).NotTo(HaveOccurred(), "rendering a %s Database", engine)
			kinds := []string{}
			for _, o := range rendered {
				kind := o.GetObjectKind().GroupVersionKind().Kind
				kinds = append(kinds, kind)
				if sts, ok := o.(*appsv1.StatefulSet); ok && len(sts.Spec.VolumeClaimTemplates) > 0 {
					// Their PVCs are listed, patched (Orphan) and deleted on teardown.
					kinds = append(kinds, "PersistentVolumeClaim")
				}
				if o.GetObjectKind().GroupVersionKind() == member.CNPGClusterGVK {
					// Its PVCs lose their owner references on a Retain teardown.
					kinds = append(kinds, "PersistentVolumeClaim")
				}
			}
			if db.EffectiveBackend() == fleetv1alpha1.BackendCloudNativePG {
				g.Expect(kinds).To(ContainElements("Cluster", "Service", "Secret"))
			} else {
				g.Expect(kinds).To(ContainElements("StatefulSet", "PodDisruptionBudget", "PersistentVolumeClaim"))
				// The StatefulSet backend's credential rotation runs a Job.
				job, err := member.RotationJob(member.RotationParams{Database: db, Cluster: "member-1", Token: "t", Attempt: 1,
					StatefulSet: &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "orders", UID: "s"}}})
				g.Expect(err).NotTo(HaveOccurred(), "rendering a %s rotation Job", engine)
				kinds = append(kinds, job.GetObjectKind().GroupVersionKind().Kind)
				g.Expect(kinds).To(ContainElement("Job"))
			}
			for _, kind := range kinds {
				key, ok := kindResources[kind]
				g.Expect(ok).To(BeTrue(), "the hub writes %s into members: grant it in deploy/member/cluster_role.yaml and list it in this test", kind)
				grp, res := groupResource(key)
				granted, verbs := role.Rules, resourceVerbs[key]
				if key == "secrets" {
					// Bound per managed namespace by the hub.
					granted, verbs = secrets.Rules, secretVerbs[key]
				}
				if r, ok := secretVerbs[key]; ok && key != "secrets" {
					// Read per managed namespace.
					for _, v := range r {
						g.Expect(allows(secrets.Rules, permission{group: grp, resource: res, verb: v})).To(BeTrue(), "%s %s", v, key)
					}
				}
				for _, v := range verbs {
					g.Expect(allows(granted, permission{group: grp, resource: res, verb: v})).To(BeTrue(), "%s %s", v, key)
				}
			}
		}
	})
}

// TestJoinWiring keeps the local fleet and kind-up joining members with
// `kubectl fleetdb join` (cmd/kubectl-fleetdb, which embeds deploy/member:
// see deploy/member's own test), and the removed join script out of the tree.
func TestJoinWiring(t *testing.T) {
	g := NewWithT(t)
	fleet := readFile(t, "hack/fleet.sh")
	g.Expect(fleet).To(ContainSubstring("go build -o \"$cli\" ./cmd/kubectl-fleetdb"))
	g.Expect(fleet).To(MatchRegexp(`"\$cli" join "\$c" `), "hack/fleet.sh registers members with kubectl-fleetdb join")
	mk := readFile(t, "Makefile")
	g.Expect(mk).To(ContainSubstring("bin/kubectl-fleetdb join $$m"), "kind-up joins with kubectl-fleetdb")
	for _, f := range []string{"hack/fleet.sh", "Makefile", "README.md", "deploy/member/kustomization.yaml", "kind-configs/README.md"} {
		g.Expect(strings.Contains(readFile(t, f), "join-member.sh")).To(BeFalse(), "%s still mentions the removed hack/join-member.sh", f)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	out, err := exec.Command(bash, "-n", path(t, "hack/fleet.sh")).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "bash -n: %s", out)
}
