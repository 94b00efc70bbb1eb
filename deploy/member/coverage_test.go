package member

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
)

// TestPolicyCoversWrites (issue 25, item 11): every kind the ClusterRole lets
// the hub's identity write is matched by the scope policy for each write it
// may do (so none can be written outside the managed namespaces), and every
// kind that carries a pod template is matched by the pod policy. A rule
// added to cluster_role.yaml without the policy fails here.
func TestPolicyCoversWrites(t *testing.T) {
	objs, err := Render()
	if err != nil {
		t.Fatal(err)
	}
	var roles []rbacv1.ClusterRole
	policies := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			var role rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatal(err)
			}
			roles = append(roles, role)
		case "ValidatingAdmissionPolicy":
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &p); err != nil {
				t.Fatal(err)
			}
			policies[p.Name] = &p
		}
	}
	scope, pods := policies["fleetdb-hub-agent-scope"], policies["fleetdb-hub-agent-pods"]
	if len(roles) != 2 || scope == nil || pods == nil {
		t.Fatalf("deploy/member lacks the ClusterRole or a policy: %v", policies)
	}
	matches := func(p *admissionregistrationv1.ValidatingAdmissionPolicy, group, resource string, op admissionregistrationv1.OperationType) bool {
		for _, r := range p.Spec.MatchConstraints.ResourceRules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) &&
				(slices.Contains(r.Operations, op) || slices.Contains(r.Operations, admissionregistrationv1.OperationAll)) {
				return true
			}
		}
		return false
	}
	writes := map[string]admissionregistrationv1.OperationType{
		"create": admissionregistrationv1.Create, "update": admissionregistrationv1.Update,
		"patch": admissionregistrationv1.Update, "delete": admissionregistrationv1.Delete,
		"deletecollection": admissionregistrationv1.Delete,
	}
	withPods := sets.New("apps/statefulsets", "apps/deployments", "apps/daemonsets", "apps/replicasets",
		"batch/jobs", "batch/cronjobs", "/pods", "/replicationcontrollers")
	seen := 0
	var rules []rbacv1.PolicyRule
	for _, role := range roles {
		rules = append(rules, role.Rules...)
	}
	for _, rule := range rules {
		if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") {
			t.Errorf("wildcard in %+v", rule)
		}
		for _, group := range rule.APIGroups {
			for _, resource := range rule.Resources {
				for _, verb := range rule.Verbs {
					op, write := writes[verb]
					if !write {
						continue
					}
					seen++
					if !matches(scope, group, resource, op) {
						t.Errorf("the identity may %s %s (group %q) but fleetdb-hub-agent-scope does not match %s of it", verb, resource, group, op)
					}
					if withPods.Has(group+"/"+resource) && !matches(pods, group, resource, op) && op != admissionregistrationv1.Delete {
						t.Errorf("the identity may %s %s (group %q), which carries a pod template, but fleetdb-hub-agent-pods does not match %s of it", verb, resource, group, op)
					}
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no write rule found: the test reads the ClusterRole wrong")
	}
}
