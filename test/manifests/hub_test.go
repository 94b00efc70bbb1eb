package manifests

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	hubNamespace = "fleetdb-system"
	hubImage     = "ghcr.io/fleetdb/fleetdb-hub:latest"
)

// The CRDs controller-gen writes, each listed in deploy/crds/kustomization.yaml.
func TestCRDs(t *testing.T) {
	g := NewWithT(t)
	files, err := filepath.Glob(path(t, "deploy/crds/*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var want []string
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		docs := splitYAML(readFile(t, "deploy/crds/"+filepath.Base(f)))
		g.Expect(docs).To(HaveLen(1), "%s holds one CRD", f)
		want = append(want, decodeStrict(t, f, docs[0]).GetName())
	}
	g.Expect(want).To(ContainElements("databases.fleetdb.io", "memberclusters.fleetdb.io"))

	var got []string
	for _, crd := range all[*apiextensionsv1.CustomResourceDefinition](render(t, "deploy/crds")) {
		got = append(got, crd.Name)
		g.Expect(crd.Spec.Group).To(Equal("fleetdb.io"))
	}
	g.Expect(got).To(ConsistOf(want), "deploy/crds/kustomization.yaml lists every generated CRD")
}

func TestHubBase(t *testing.T) {
	objs := render(t, "deploy/hub")

	t.Run("objects", func(t *testing.T) {
		g := NewWithT(t)
		var crds []string
		for _, crd := range all[*apiextensionsv1.CustomResourceDefinition](objs) {
			crds = append(crds, crd.Name)
		}
		g.Expect(crds).To(ConsistOf("databasebackups.fleetdb.io", "databaseplacements.fleetdb.io", "databases.fleetdb.io", "memberclusters.fleetdb.io"))
		mustFind[*corev1.Namespace](t, objs, "", hubNamespace)
		// The teardown finalizer at admission ships with the hub.
		mustFind[*admissionregistrationv1.MutatingAdmissionPolicy](t, objs, "", "fleetdb-teardown-finalizer")
		mustFind[*admissionregistrationv1.MutatingAdmissionPolicyBinding](t, objs, "", "fleetdb-teardown-finalizer")
		for _, o := range objs {
			switch o.(type) {
			case *corev1.Namespace, *apiextensionsv1.CustomResourceDefinition, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding,
				*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding,
				*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding:
				g.Expect(o.GetNamespace()).To(BeEmpty(), "%s is cluster-scoped", describe([]client.Object{o}))
			default:
				g.Expect(o.GetNamespace()).To(Equal(hubNamespace), "%s lives in the hub namespace", describe([]client.Object{o}))
			}
		}
	})

	dep := mustFind[*appsv1.Deployment](t, objs, hubNamespace, "fleetdb-hub")
	pod := dep.Spec.Template.Spec

	t.Run("deployment", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(dep.Spec.Replicas).NotTo(BeNil())
		g.Expect(*dep.Spec.Replicas).To(BeNumerically(">=", 1))
		g.Expect(dep.Spec.Selector.MatchLabels).NotTo(BeEmpty())
		for k, v := range dep.Spec.Selector.MatchLabels {
			g.Expect(dep.Spec.Template.Labels).To(HaveKeyWithValue(k, v), "the selector selects the pods")
		}
		g.Expect(pod.Containers).To(HaveLen(1))
		c := pod.Containers[0]
		g.Expect(c.Image).To(Equal(hubImage), "the kustomization's images: entry sets the image")
		g.Expect(c.Command).To(BeEmpty(), "the image's entrypoint is the binary")

		// Every flag exists in the binary, and the ones that matter are set.
		defined := hubFlags(t)
		args := map[string]string{}
		for _, a := range c.Args {
			g.Expect(a).To(HavePrefix("--"))
			name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			g.Expect(defined).To(ContainElement(name), "fleetdb-hub has no flag --%s", name)
			args[name] = value
		}
		g.Expect(args).To(HaveKey("leader-elect"))
		g.Expect(args["leader-elect"]).To(BeElementOf("", "true"), "--leader-elect is on (replicas > 1 rely on it)")
		// The hub namespace (protected, holds the lease) is the pod's own.
		if ns, ok := args["hub-namespace"]; ok {
			if ns != hubNamespace {
				g.Expect(ns).To(Equal("$(POD_NAMESPACE)"))
				i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAMESPACE" })
				g.Expect(i).To(BeNumerically(">=", 0), "POD_NAMESPACE is set")
				if i >= 0 {
					ref := c.Env[i].ValueFrom
					g.Expect(ref != nil && ref.FieldRef != nil && ref.FieldRef.FieldPath == "metadata.namespace").To(BeTrue(),
						"POD_NAMESPACE comes from metadata.namespace")
				}
			}
		}

		// Metrics only to scrapers the API server authenticates and authorizes.
		g.Expect(args).To(HaveKey("metrics-secure"))
		g.Expect(args["metrics-secure"]).To(BeElementOf("", "true"), "--metrics-secure is on")
		metrics := bindPort(args, "metrics-bind-address", ":8080")
		health := bindPort(args, "health-probe-bind-address", ":8081")
		g.Expect(metrics).To(Equal(int32(8080)))
		g.Expect(health).To(Equal(int32(8081)))
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		g.Expect(ports).To(ContainElement(metrics), "the metrics port is declared")

		for name, probe := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
			g.Expect(probe).NotTo(BeNil(), "probe %s", name)
			if probe == nil {
				continue
			}
			g.Expect(probe.HTTPGet).NotTo(BeNil(), "probe %s is an HTTP GET", name)
			if probe.HTTPGet == nil {
				continue
			}
			g.Expect(probe.HTTPGet.Path).To(Equal(name))
			g.Expect(resolvePort(probe.HTTPGet.Port, ports)).To(Equal(health), "probe %s hits the health port", name)
		}

		g.Expect(c.Resources.Requests.Cpu().IsZero()).To(BeFalse(), "CPU request")
		g.Expect(c.Resources.Requests.Memory().IsZero()).To(BeFalse(), "memory request")
		g.Expect(c.Resources.Limits.Memory().IsZero()).To(BeFalse(), "memory limit")
		g.Expect(c.Resources.Limits.Memory().Cmp(*c.Resources.Requests.Memory())).To(BeNumerically(">=", 0), "limit >= request")
	})

	t.Run("security context", func(t *testing.T) {
		g := NewWithT(t)
		psc := pod.SecurityContext
		g.Expect(psc).NotTo(BeNil())
		g.Expect(psc.RunAsNonRoot).To(HaveValue(BeTrue()), "pod runAsNonRoot")
		g.Expect(psc.SeccompProfile).NotTo(BeNil())
		g.Expect(psc.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
		if psc.RunAsUser != nil {
			g.Expect(*psc.RunAsUser).NotTo(BeZero())
		}
		g.Expect(pod.HostNetwork || pod.HostPID || pod.HostIPC).To(BeFalse())
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			sc := c.SecurityContext
			g.Expect(sc).NotTo(BeNil(), "container %s", c.Name)
			if sc == nil {
				continue
			}
			g.Expect(sc.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()), "container %s readOnlyRootFilesystem", c.Name)
			g.Expect(sc.AllowPrivilegeEscalation).To(HaveValue(BeFalse()), "container %s allowPrivilegeEscalation", c.Name)
			g.Expect(sc.Privileged).To(Or(BeNil(), HaveValue(BeFalse())), "container %s privileged", c.Name)
			g.Expect(sc.Capabilities).NotTo(BeNil())
			g.Expect(sc.Capabilities.Drop).To(ContainElement(corev1.Capability("ALL")), "container %s drops all capabilities", c.Name)
			g.Expect(sc.Capabilities.Add).To(BeEmpty(), "container %s adds no capabilities", c.Name)
			if sc.RunAsUser != nil {
				g.Expect(*sc.RunAsUser).NotTo(BeZero())
			}
		}
	})

	t.Run("metrics service", func(t *testing.T) {
		g := NewWithT(t)
		var found bool
		for _, svc := range all[*corev1.Service](objs) {
			for _, p := range svc.Spec.Ports {
				if resolvePort(p.TargetPort, containerPorts(pod)) != 8080 {
					continue
				}
				found = true
				for k, v := range svc.Spec.Selector {
					g.Expect(dep.Spec.Template.Labels).To(HaveKeyWithValue(k, v), "service %s selects the hub pods", svc.Name)
				}
			}
		}
		g.Expect(found).To(BeTrue(), "a Service exposes the metrics port")
	})

	t.Run("identity", func(t *testing.T) {
		g := NewWithT(t)
		sa := pod.ServiceAccountName
		g.Expect(sa).To(Equal("fleetdb-hub"))
		mustFind[*corev1.ServiceAccount](t, objs, hubNamespace, sa)
		generated := generatedClusterRole(t)
		role := mustFind[*rbacv1.ClusterRole](t, objs, "", generated.Name)
		g.Expect(role.Rules).To(Equal(generated.Rules), "deploy/hub ships the generated ClusterRole unchanged")
		g.Expect(boundClusterRoles(objs, hubNamespace, sa)).To(ContainElement(generated.Name),
			"a ClusterRoleBinding binds the generated ClusterRole to the hub's ServiceAccount")
	})

	t.Run("rbac", func(t *testing.T) {
		g := NewWithT(t)
		sa := pod.ServiceAccountName
		clusterWide := rulesFor(objs, hubNamespace, sa, "")
		inHubNamespace := rulesFor(objs, hubNamespace, sa, hubNamespace)
		for _, r := range all[*rbacv1.ClusterRole](objs) {
			expectNoWildcards(g, "ClusterRole "+r.Name, r.Rules)
			var rules, rbacOnes []rbacv1.PolicyRule
			for _, rule := range r.Rules {
				if slices.Contains(rule.APIGroups, rbacv1.GroupName) {
					rbacOnes = append(rbacOnes, rule)
				} else {
					rules = append(rules, rule)
				}
			}
			expectNoEscalation(g, "ClusterRole "+r.Name, rules)
			if r.Name == "fleetdb-hub" {
				// The hub binds its Secret role (and only it) by a RoleBinding
				// in a tenant namespace, and removes that RoleBinding; the
				// admission policy holds it there (secrets_policy.yaml).
				g.Expect(rbacOnes).To(ConsistOf(hubRBACRules), "the hub ClusterRole's RBAC rules: its Secret role's binding only")
			} else {
				g.Expect(rbacOnes).To(BeEmpty(), "ClusterRole %s: RBAC objects", r.Name)
			}
		}
		for _, r := range all[*rbacv1.Role](objs) {
			expectNoWildcards(g, "Role "+r.Name, r.Rules)
			expectNoEscalation(g, "Role "+r.Name, r.Rules)
		}

		// What the hub's code does in every namespace (see hub/ and clusters/).
		for _, p := range []permission{
			// The Database controller: finalizer and spec-side patches, status.
			{group: "fleetdb.io", resource: "databases", verb: "get"},
			{group: "fleetdb.io", resource: "databases", verb: "list"},
			{group: "fleetdb.io", resource: "databases", verb: "watch"},
			{group: "fleetdb.io", resource: "databases", verb: "patch"},
			{group: "fleetdb.io", resource: "databases/status", verb: "patch"},
			// Credentials Secrets carry an owner reference with blockOwnerDeletion.
			{group: "fleetdb.io", resource: "databases/finalizers", verb: "update"},
			// The cluster registry: watches MemberClusters, writes their status.
			{group: "fleetdb.io", resource: "memberclusters", verb: "get"},
			{group: "fleetdb.io", resource: "memberclusters", verb: "list"},
			{group: "fleetdb.io", resource: "memberclusters", verb: "watch"},
			{group: "fleetdb.io", resource: "memberclusters/status", verb: "patch"},
			// Its Secret role bound where a Database lives, and the checks
			// that the binding took effect.
			{group: "rbac.authorization.k8s.io", resource: "rolebindings", verb: "create"},
			{group: "rbac.authorization.k8s.io", resource: "rolebindings", verb: "delete", name: hubSecretRole},
			{group: "rbac.authorization.k8s.io", resource: "rolebindings", verb: "list", name: hubSecretRole},
			{group: "rbac.authorization.k8s.io", resource: "clusterroles", verb: "bind", name: hubSecretRole},
			{group: "authorization.k8s.io", resource: "selfsubjectaccessreviews", verb: "create"},
			{group: "authentication.k8s.io", resource: "selfsubjectreviews", verb: "create"},
			// The secure metrics endpoint: who a scraper is, and whether it may get /metrics.
			{group: "authentication.k8s.io", resource: "tokenreviews", verb: "create"},
			{group: "authorization.k8s.io", resource: "subjectaccessreviews", verb: "create"},
			// Events on Databases (events.k8s.io recorder).
			{group: "events.k8s.io", resource: "events", verb: "create"},
			{group: "events.k8s.io", resource: "events", verb: "patch"},
		} {
			g.Expect(allows(clusterWide, p)).To(BeTrue(), "the hub may %s %s (group %q) in every namespace", p.verb, p.resource, p.group)
		}

		// Leader election in the hub namespace, and the kubeconfig Secrets there.
		lease := leaderElectionID(t)
		for _, p := range []permission{
			{group: "coordination.k8s.io", resource: "leases", verb: "create"},
			{group: "coordination.k8s.io", resource: "leases", verb: "get", name: lease},
			{group: "coordination.k8s.io", resource: "leases", verb: "update", name: lease},
			// controller-runtime's leader elector records core/v1 Events.
			{group: "", resource: "events", verb: "create"},
			{group: "", resource: "events", verb: "patch"},
			{group: "", resource: "secrets", verb: "get"},
		} {
			g.Expect(allows(inHubNamespace, p)).To(BeTrue(), "the hub may %s %s %s (group %q) in %s", p.verb, p.resource, p.name, p.group, hubNamespace)
		}
		// No Secret right anywhere but in the hub namespace: the Secret role
		// holds the tenant namespaces' ones, bound per namespace by the hub.
		for _, v := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
			g.Expect(allows(clusterWide, permission{resource: "secrets", verb: v})).To(BeFalse(), "no %s secrets cluster-wide", v)
		}
		for _, v := range []string{"create", "update", "patch", "delete"} {
			g.Expect(allows(inHubNamespace, permission{resource: "secrets", verb: v})).To(BeFalse(), "no %s secrets in %s", v, hubNamespace)
		}
		for _, v := range []string{"list", "watch"} {
			g.Expect(allows(inHubNamespace, permission{resource: "secrets", verb: v})).To(BeTrue(), "the kubeconfigs' metadata watch: %s secrets in %s", v, hubNamespace)
		}
		secrets := mustFind[*rbacv1.ClusterRole](t, objs, "", hubSecretRole)
		g.Expect(secrets.Rules).To(ConsistOf(rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"},
			Verbs: []string{"get", "list", "watch", "create", "patch"}}), "the hub's Secret role: what it does with fleetdb's Secrets")
		g.Expect(boundClusterRoles(objs, hubNamespace, sa)).NotTo(ContainElement(hubSecretRole), "the Secret role is never bound cluster-wide")
		for _, b := range all[*rbacv1.RoleBinding](objs) {
			g.Expect(b.RoleRef.Name).NotTo(Equal(hubSecretRole), "RoleBinding %s/%s: the hub binds its Secret role itself, never in its own namespace", b.Namespace, b.Name)
		}

		// Leases elsewhere are none of the hub's business.
		g.Expect(allows(clusterWide, permission{group: "coordination.k8s.io", resource: "leases", verb: "update", name: lease})).
			To(BeFalse(), "leases only in %s", hubNamespace)
	})
}

// hubSecretRole is deploy/rbac's ClusterRole with the hub's Secret rights in
// a tenant namespace (hubsecret.Role), bound by the hub itself.
const hubSecretRole = "fleetdb-hub-secrets"

// hubRBACRules are the hub ClusterRole's rules on RBAC objects: creating the
// RoleBinding of its Secret role, binding that role alone, and listing
// (field selector metadata.name) and deleting that RoleBinding by name (the
// admission policy holds the rest).
var hubRBACRules = []rbacv1.PolicyRule{
	{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"rolebindings"}, Verbs: []string{"create"}},
	{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"rolebindings"}, ResourceNames: []string{hubSecretRole}, Verbs: []string{"delete", "list"}},
	{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, ResourceNames: []string{hubSecretRole}, Verbs: []string{"bind"}},
}

// TestRBACBase checks deploy/rbac alone (without deploy/hub's namespace
// transformer) puts everything in the hub namespace.
func TestRBACBase(t *testing.T) {
	g := NewWithT(t)
	objs := render(t, "deploy/rbac")
	mustFind[*corev1.ServiceAccount](t, objs, hubNamespace, "fleetdb-hub")
	for _, b := range all[*rbacv1.ClusterRoleBinding](objs) {
		for _, s := range b.Subjects {
			g.Expect(s.Namespace).To(Equal(hubNamespace), "ClusterRoleBinding %s subject %s", b.Name, s.Name)
		}
	}
	for _, b := range all[*rbacv1.RoleBinding](objs) {
		g.Expect(b.Namespace).To(Equal(hubNamespace))
	}
	g.Expect(regexp.MustCompile(`(?m)^\t\$\(CONTROLLER_GEN\) rbac:roleName=fleetdb-hub .*output:rbac:artifacts:config=deploy/rbac$`).
		MatchString(readFile(t, "Makefile"))).To(BeTrue(), "make generate writes deploy/rbac/role.yaml")
}

// generatedClusterRole is deploy/rbac/role.yaml as controller-gen wrote it.
func generatedClusterRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	var roles []*rbacv1.ClusterRole
	for _, doc := range splitYAML(readFile(t, "deploy/rbac/role.yaml")) {
		switch o := decodeStrict(t, "deploy/rbac/role.yaml", doc).(type) {
		case *rbacv1.ClusterRole:
			roles = append(roles, o)
		case *rbacv1.Role:
			// The namespaced Role of the hub namespace (the sharded hub's
			// DatabasePlacements), generated from the same markers.
		default:
			t.Fatalf("deploy/rbac/role.yaml holds a %T: want the generated ClusterRole and Roles only", o)
		}
	}
	if len(roles) != 1 {
		t.Fatalf("deploy/rbac/role.yaml: want one ClusterRole, got %d", len(roles))
	}
	return roles[0]
}

// hubFlags are the flags cmd/fleetdb-hub defines.
func hubFlags(t *testing.T) []string {
	t.Helper()
	src := readFile(t, "cmd/fleetdb-hub/main.go")
	var flags []string
	for _, m := range regexp.MustCompile(`flag\.\w+Var\(\s*&[^,]+,\s*"([^"]+)"`).FindAllStringSubmatch(src, -1) {
		flags = append(flags, m[1])
	}
	for _, m := range regexp.MustCompile(`flag\.(?:String|Bool|Int|Int64|Uint|Uint64|Float64|Duration)\(\s*"([^"]+)"`).FindAllStringSubmatch(src, -1) {
		flags = append(flags, m[1])
	}
	if len(flags) == 0 {
		t.Fatal("found no flags in cmd/fleetdb-hub/main.go")
	}
	return flags
}

// leaderElectionID is the Lease name the hub's manager elects with.
func leaderElectionID(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`LeaderElectionID\s*=\s*"([^"]+)"`).FindStringSubmatch(readFile(t, "hub/leader.go"))
	if m == nil {
		t.Fatal("hub/leader.go: no LeaderElectionID constant; update leaderElectionID() in this test")
	}
	return m[1]
}

// bindPort is the port of a --flag=host:port argument, or of its default.
func bindPort(args map[string]string, flag, def string) int32 {
	v, ok := args[flag]
	if !ok {
		v = def
	}
	_, port, found := strings.Cut(v, ":")
	if !found {
		return -1
	}
	return intstr.Parse(port).IntVal
}

func containerPorts(pod corev1.PodSpec) map[string]int32 {
	ports := map[string]int32{}
	for _, c := range pod.Containers {
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
	}
	return ports
}

// resolvePort turns a named or numbered port into its number.
func resolvePort(p intstr.IntOrString, named map[string]int32) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	if n, ok := named[p.StrVal]; ok {
		return n
	}
	return -1
}

// boundClusterRoles are the ClusterRoles bound cluster-wide to the ServiceAccount.
func boundClusterRoles(objs []client.Object, saNamespace, sa string) []string {
	var out []string
	for _, b := range all[*rbacv1.ClusterRoleBinding](objs) {
		if b.RoleRef.Kind == "ClusterRole" && b.RoleRef.APIGroup == rbacv1.GroupName && hasSubject(b.Subjects, saNamespace, sa) {
			out = append(out, b.RoleRef.Name)
		}
	}
	return out
}

// rulesFor are the rules that apply to the ServiceAccount in namespace (""
// for cluster-wide: ClusterRoleBindings only).
func rulesFor(objs []client.Object, saNamespace, sa, namespace string) []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	for _, name := range boundClusterRoles(objs, saNamespace, sa) {
		if r, ok := find[*rbacv1.ClusterRole](objs, "", name); ok {
			rules = append(rules, r.Rules...)
		}
	}
	if namespace == "" {
		return rules
	}
	for _, b := range all[*rbacv1.RoleBinding](objs) {
		if b.Namespace != namespace || !hasSubject(b.Subjects, saNamespace, sa) || b.RoleRef.APIGroup != rbacv1.GroupName {
			continue
		}
		switch b.RoleRef.Kind {
		case "Role":
			if r, ok := find[*rbacv1.Role](objs, namespace, b.RoleRef.Name); ok {
				rules = append(rules, r.Rules...)
			}
		case "ClusterRole":
			if r, ok := find[*rbacv1.ClusterRole](objs, "", b.RoleRef.Name); ok {
				rules = append(rules, r.Rules...)
			}
		}
	}
	return rules
}

func hasSubject(subjects []rbacv1.Subject, namespace, sa string) bool {
	return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
		return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == namespace
	})
}

// expectNoEscalation fails on rules that would let the identity grant itself
// more: RBAC objects, impersonation, escalate/bind, exec into pods.
func expectNoEscalation(g Gomega, what string, rules []rbacv1.PolicyRule) {
	for i, r := range rules {
		g.Expect(r.APIGroups).NotTo(ContainElement(rbacv1.GroupName), "%s rule %d: RBAC objects", what, i)
		g.Expect(r.Verbs).NotTo(ContainElements("escalate"), "%s rule %d", what, i)
		g.Expect(r.Verbs).NotTo(ContainElements("bind"), "%s rule %d", what, i)
		g.Expect(r.Verbs).NotTo(ContainElements("impersonate"), "%s rule %d", what, i)
		g.Expect(r.Resources).NotTo(ContainElements("pods/exec"), "%s rule %d", what, i)
		g.Expect(r.Resources).NotTo(ContainElements("serviceaccounts/token"), "%s rule %d", what, i)
	}
}
