package member

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func credsSecret(hub, uid, password string) *corev1.Secret {
	l := map[string]string{
		fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue, fleetv1alpha1.LabelDatabaseNamespace: "ns",
		fleetv1alpha1.LabelDatabaseName: "db", fleetv1alpha1.LabelDatabaseUID: uid,
	}
	if hub != "" {
		l[fleetv1alpha1.LabelHubID] = hub
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-credentials", Labels: l},
		Data:       map[string][]byte{"username": []byte("app"), "password": []byte(password)},
	}
}

func TestGuardOwnership(t *testing.T) {
	desired := credsSecret("hub-a", "uid-2", "new")
	for _, tc := range []struct {
		name     string
		cur      *corev1.Secret
		conflict bool
	}{
		{"this Database's own Secret", credsSecret("hub-a", "uid-2", "new"), false},
		{"this Database's own Secret, drifted", credsSecret("hub-a", "uid-2", "edited"), false},
		{"an earlier Database of this hub, same password", credsSecret("hub-a", "uid-1", "new"), false},
		{"an earlier Database of this hub, another password", credsSecret("hub-a", "uid-1", "old"), true},
		{"another hub's", credsSecret("hub-b", "uid-2", "new"), true},
		{"older than hub identities, this Database", credsSecret("", "uid-2", "new"), false},
		{"older than hub identities, another Database", credsSecret("", "uid-1", "new"), true},
		{"released by a Retain teardown, same password", released(credsSecret("", "uid-1", "new")), false},
		{"released by a Retain teardown, another password", released(credsSecret("", "uid-1", "old")), true},
	} {
		err := guardOwnership(desired, tc.cur)
		var c *ConflictError
		if got := errors.As(err, &c); got != tc.conflict {
			t.Errorf("%s: conflict %v, want %v (%v)", tc.name, got, tc.conflict, err)
		}
	}
}

func TestOwnerOwns(t *testing.T) {
	o := Owner{Namespace: "ns", Name: "db", UID: "uid-2", HubID: "hub-a"}
	for _, tc := range []struct {
		name string
		obj  *corev1.Secret
		want bool
	}{
		{"this hub's", credsSecret("hub-a", "uid-1", "x"), true},
		{"another hub's", credsSecret("hub-b", "uid-2", "x"), false},
		{"older, this Database", credsSecret("", "uid-2", "x"), true},
		{"older, another Database", credsSecret("", "uid-1", "x"), false},
	} {
		if got := o.owns(tc.obj); got != tc.want {
			t.Errorf("%s: owns %v, want %v", tc.name, got, tc.want)
		}
	}
	if !(Owner{Namespace: "ns", Name: "db"}).owns(credsSecret("hub-b", "uid-1", "x")) {
		t.Error("an Owner without a hub identity matches every hub")
	}
}

// released is s as a Retain teardown leaves it: without fleetdb's labels.
func released(s *corev1.Secret) *corev1.Secret {
	s.Labels = nil
	return s
}
