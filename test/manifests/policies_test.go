package manifests

import (
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/fleetdb/fleetdb/test/fleet"
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
		"deploy/member/cnpg": "fleetdb-hub-agent-cnpg",
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

// TestCNPGPolicyCoversTheSpec (issue 42, item 3): every top-level field of
// the pinned CloudNativePG Cluster spec is either one fleetdb renders, one
// CloudNativePG's defaulting fills in (allowed by fleetdb-hub-agent-cnpg), or
// one that policy checks. A field a new CloudNativePG release adds fails here
// until the policy says what the hub's identity may do with it.
func TestCNPGPolicyCoversTheSpec(t *testing.T) {
	g := NewWithT(t)
	crdPath, err := fleet.CNPGClusterCRD()
	if err != nil {
		t.Skipf("the CloudNativePG module is not available: %v", err)
	}
	raw, err := os.ReadFile(crdPath)
	g.Expect(err).NotTo(HaveOccurred())
	var crd apiextensionsv1.CustomResourceDefinition
	g.Expect(yaml.Unmarshal(raw, &crd)).To(Succeed())
	g.Expect(crd.Spec.Versions).NotTo(BeEmpty())
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	g.Expect(spec.Properties).NotTo(BeEmpty())
	p := mustFind[*admissionregistrationv1.ValidatingAdmissionPolicy](t, render(t, "deploy/member"), "", "fleetdb-hub-agent-cnpg")
	var policy strings.Builder
	for _, v := range p.Spec.Validations {
		policy.WriteString(v.Expression)
	}
	// Rendered by member/cnpg.go and cnpg_topology.go, or filled in by
	// CloudNativePG's defaulting (the CRD's defaults, Cluster.setDefaults).
	allowed := map[string]bool{
		"instances": true, "imageName": true, "storage": true, "bootstrap": true, "resources": true,
		"replica": true, "externalClusters": true, "postgresql": true, "certificates": true,
		"enablePDB": true, "failoverDelay": true, "logLevel": true, "maxSyncReplicas": true, "minSyncReplicas": true,
		"primaryUpdateMethod": true, "primaryUpdateStrategy": true, "smartShutdownTimeout": true, "startDelay": true,
		"stopDelay": true, "switchoverDelay": true, "replicationSlots": true, "probes": true,
	}
	for field := range spec.Properties {
		if allowed[field] {
			continue
		}
		g.Expect(policy.String()).To(ContainSubstring("has(object.spec."+field+")"),
			"CloudNativePG's Cluster spec has %q, which fleetdb neither renders nor lets CloudNativePG default: hold it in fleetdb-hub-agent-cnpg", field)
	}
}
