package database

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func TestMustWaitForCredentials(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    recovered
		want bool
	}{
		{"every placed member read", recovered{readable: 2}, false},
		{"no placed member readable", recovered{unreadable: []string{"a"}}, true},
		{"one of several placed members unreadable", recovered{unreadable: []string{"a"}, readable: 1}, false},
		{"a member it ran on unreadable", recovered{unreadable: []string{"a"}, readable: 1, ranUnreadable: true}, true},
	} {
		if got := tc.r.mustWait(); got != tc.want {
			t.Errorf("%s: mustWait %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTeardownPolicy(t *testing.T) {
	db := &fleetv1alpha1.Database{}
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyDelete
	if p := db.TeardownPolicy(); p != fleetv1alpha1.DeletionPolicyRetain {
		t.Errorf("a dropped member of a live Database: %s, want Retain by default", p)
	}
	now := metav1.Now()
	db.DeletionTimestamp = &now
	if p := db.TeardownPolicy(); p != fleetv1alpha1.DeletionPolicyDelete {
		t.Errorf("a deleted Database: %s, want its deletionPolicy", p)
	}
}
