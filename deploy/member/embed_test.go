package member

import (
	"testing"
)

// TestRender builds the embedded kustomization: the objects join installs.
func TestRender(t *testing.T) {
	objs, err := Render()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, o := range objs {
		got[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = true
		if o.GetKind() == "ValidatingAdmissionPolicy" && o.GetNamespace() != "" {
			t.Errorf("%s is cluster-scoped but has namespace %q", o.GetName(), o.GetNamespace())
		}
	}
	for _, want := range []string{
		"Namespace//" + Namespace,
		"ServiceAccount/" + Namespace + "/" + ServiceAccount,
		"Secret/" + Namespace + "/" + TokenSecret,
		"ClusterRole//fleetdb-hub-agent",
		"ClusterRoleBinding//fleetdb-hub-agent",
		"ValidatingAdmissionPolicy//fleetdb-hub-agent-scope",
		"ValidatingAdmissionPolicyBinding//fleetdb-hub-agent-scope",
		"ValidatingAdmissionPolicy//fleetdb-hub-agent-pods",
		"ValidatingAdmissionPolicyBinding//fleetdb-hub-agent-pods",
	} {
		if !got[want] {
			t.Errorf("missing %s in %v", want, got)
		}
	}
	if objs[0].GetKind() != "Namespace" {
		t.Errorf("the Namespace must come first, got %s", objs[0].GetKind())
	}
}
