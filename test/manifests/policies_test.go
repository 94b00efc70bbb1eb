package manifests

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// TestAdmissionPolicies checks that the bases ship their admission policies,
// each bound with Deny. What they enforce is tested on a real API server
// (test/integration: TestSecurity, TestMemberAccess).
func TestAdmissionPolicies(t *testing.T) {
	for base, name := range map[string]string{
		"deploy/hub":         "fleetdb-deletion-protection",
		"deploy/hub/secrets": "fleetdb-hub-secrets",
		"deploy/hub/binds":   "fleetdb-hub-secret-bindings",
		"deploy/hub/where":   "fleetdb-hub-binds-only-where-databases-live",
		"deploy/member":      "fleetdb-hub-agent-scope",
		"deploy/member/pods": "fleetdb-hub-agent-pods",
	} {
		base, _, _ := strings.Cut(strings.TrimPrefix(base, "deploy/"), "/")
		base = "deploy/" + base
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			objs := render(t, base)
			p := mustFind[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objs, "", name)
			g.Expect(p.Spec.FailurePolicy).NotTo(BeNil())
			g.Expect(*p.Spec.FailurePolicy).To(Equal(admissionregistrationv1.Fail), "an unevaluable policy refuses")
			g.Expect(p.Spec.Validations).NotTo(BeEmpty())
			b := mustFind[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, objs, "", name)
			g.Expect(b.Spec.PolicyName).To(Equal(name))
			g.Expect(b.Spec.ValidationActions).To(ConsistOf(admissionregistrationv1.Deny))
		})
	}
}
