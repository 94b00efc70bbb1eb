package database

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func TestRestoreObjects(t *testing.T) {
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "copy"}}
	db.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: "nightly"}
	objs := func() []client.Object {
		return []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "copy-credentials"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "copy"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "copy-hl"}},
		}
	}
	names := func(list []client.Object) []string {
		var out []string
		for _, o := range list {
			out = append(out, o.GetName())
		}
		return out
	}
	g := NewWithT(t)
	g.Expect(names(restoreObjects(objs(), db, &memberRestore{}))).To(ConsistOf("copy-credentials", "copy", "copy-hl"), "no restoreFrom: as rendered")

	pending := restoreObjects(objs(), db, &memberRestore{active: true, marker: "nightly"})
	g.Expect(names(pending)).To(ConsistOf("copy-credentials", "copy-hl"), "the client Service is withheld until restored")
	g.Expect(pending[0].GetAnnotations()).NotTo(HaveKey(fleetv1alpha1.AnnotationRestored))

	done := restoreObjects(objs(), db, &memberRestore{active: true, done: true, marker: "nightly"})
	g.Expect(names(done)).To(ConsistOf("copy-credentials", "copy", "copy-hl"))
	g.Expect(done[0].GetAnnotations()).To(HaveKeyWithValue(fleetv1alpha1.AnnotationRestored, "nightly"), "the durable record")
}

func TestApplyRestoreStatus(t *testing.T) {
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "copy", Generation: 1}}
	db.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: "nightly"}
	report := func(phase, reason string) *memberResult {
		return &memberResult{Restore: restoreReport{Active: true, Phase: phase, Reason: reason, Started: 1000}}
	}
	for _, tc := range []struct {
		name    string
		results map[string]*memberResult
		status  metav1.ConditionStatus
		reason  string
		stalled bool
	}{
		{"all restored", map[string]*memberResult{"a": report("Succeeded", ""), "b": report("Succeeded", "")}, metav1.ConditionTrue, fleetv1alpha1.ReasonRestored, false},
		{"one failed", map[string]*memberResult{"a": report("Succeeded", ""), "b": report("Failed", fleetv1alpha1.ReasonRestoreFailed)}, metav1.ConditionFalse, fleetv1alpha1.ReasonRestoreFailed, false},
		{"one not observed yet", map[string]*memberResult{"a": report("Succeeded", "")}, metav1.ConditionFalse, fleetv1alpha1.ReasonRestoring, false},
		{"waiting and unusable", map[string]*memberResult{"a": report("Pending", fleetv1alpha1.ReasonWaitingForBackup), "b": report("Pending", fleetv1alpha1.ReasonBackupUnusable)},
			metav1.ConditionFalse, fleetv1alpha1.ReasonBackupUnusable, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			st := fleetv1alpha1.DatabaseStatus{ObservedGeneration: 1}
			applyRestoreStatus(&st, db, tc.results, []string{"b", "a"})
			g.Expect(st.Restore).To(HaveLen(2))
			g.Expect(st.Restore[0].Cluster).To(Equal("a"))
			c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionRestored)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(tc.status))
			g.Expect(c.Reason).To(Equal(tc.reason))
			g.Expect(meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.ConditionStalled)).To(Equal(tc.stalled))
			if tc.stalled {
				g.Expect(st.Phase).To(Equal(fleetv1alpha1.PhaseFailed))
			}
		})
	}
	g := NewWithT(t)
	plain := db.DeepCopy()
	plain.Spec.RestoreFrom = nil
	st := fleetv1alpha1.DatabaseStatus{}
	applyRestoreStatus(&st, plain, map[string]*memberResult{"a": {}}, []string{"a"})
	g.Expect(st.Restore).To(BeEmpty())
	g.Expect(meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionRestored)).To(BeNil(), "no Restored condition without restoreFrom")
}

// A Database stalled on an unusable backup gets the same status from every
// pass (computeStatus clears Stalled and sets Reconciling first): no write per pass.
func TestApplyRestoreStatusStalledIsSteady(t *testing.T) {
	g := NewWithT(t)
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "copy", Generation: 1}}
	db.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: "nightly", FromCluster: "b"}
	results := map[string]*memberResult{"a": {Restore: restoreReport{Active: true, Phase: "Pending", Reason: fleetv1alpha1.ReasonBackupUnusable}}}
	pass := func() fleetv1alpha1.DatabaseStatus {
		st := fleetv1alpha1.DatabaseStatus{ObservedGeneration: 1, Conditions: append([]metav1.Condition(nil), db.Status.Conditions...)}
		meta.RemoveStatusCondition(&st.Conditions, fleetv1alpha1.ConditionStalled)
		setCondition(&st, fleetv1alpha1.ConditionReconciling, metav1.ConditionTrue, fleetv1alpha1.ReasonProgressing, "members move")
		applyRestoreStatus(&st, db, results, []string{"a"})
		return st
	}
	first := pass()
	db.Status = first
	for i := range db.Status.Conditions {
		db.Status.Conditions[i].LastTransitionTime = metav1.NewTime(first.Conditions[i].LastTransitionTime.Add(-time.Hour))
	}
	second := pass()
	g.Expect(second.Conditions).To(Equal(db.Status.Conditions))
}
