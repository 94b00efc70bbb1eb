package member

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestSubjectOf: the Secret role is bound to exactly the identity the hub
// authenticates as; deploy/member's policy admits only the ServiceAccount.
func TestSubjectOf(t *testing.T) {
	for name, want := range map[string]rbacv1.Subject{
		"system:serviceaccount:fleetdb-system:fleetdb-hub-agent": {Kind: rbacv1.ServiceAccountKind, Namespace: "fleetdb-system", Name: "fleetdb-hub-agent"},
		"system:serviceaccount:broken":                           {Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccount:broken"},
		"alice":                                                  {Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"},
	} {
		got, err := subjectOf(name)
		if err != nil || got != want {
			t.Errorf("subjectOf(%q) = %+v, %v; want %+v", name, got, err, want)
		}
	}
	if _, err := subjectOf(""); err == nil {
		t.Error("an empty user name must be refused")
	}
}
