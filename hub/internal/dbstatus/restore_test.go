package dbstatus

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func TestApplyRestoreStatus(t *testing.T) {
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "copy", Generation: 1}}
	db.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: "nightly"}
	report := func(phase, reason string) *Result {
		return &Result{Restore: RestoreReport{Active: true, Phase: phase, Reason: reason, Started: 1000}}
	}
	for _, tc := range []struct {
		name    string
		results map[string]*Result
		status  metav1.ConditionStatus
		reason  string
		stalled bool
	}{
		{"all restored", map[string]*Result{"a": report("Succeeded", ""), "b": report("Succeeded", "")}, metav1.ConditionTrue, fleetv1alpha1.ReasonRestored, false},
		{"one failed", map[string]*Result{"a": report("Succeeded", ""), "b": report("Failed", fleetv1alpha1.ReasonRestoreFailed)}, metav1.ConditionFalse, fleetv1alpha1.ReasonRestoreFailed, false},
		{"one not observed yet", map[string]*Result{"a": report("Succeeded", "")}, metav1.ConditionFalse, fleetv1alpha1.ReasonRestoring, false},
		{"waiting and unusable", map[string]*Result{"a": report("Pending", fleetv1alpha1.ReasonWaitingForBackup), "b": report("Pending", fleetv1alpha1.ReasonBackupUnusable)},
			metav1.ConditionFalse, fleetv1alpha1.ReasonBackupUnusable, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			st := fleetv1alpha1.DatabaseStatus{ObservedGeneration: 1}
			ApplyRestore(&st, db, tc.results, []string{"b", "a"})
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
	ApplyRestore(&st, plain, map[string]*Result{"a": {}}, []string{"a"})
	g.Expect(st.Restore).To(BeEmpty())
	g.Expect(meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionRestored)).To(BeNil(), "no Restored condition without restoreFrom")
}

// A Database stalled on an unusable backup gets the same status from every
// pass (Compute clears Stalled and sets Reconciling first): no write per pass.
func TestApplyRestoreStatusStalledIsSteady(t *testing.T) {
	g := NewWithT(t)
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "copy", Generation: 1}}
	db.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: "nightly", FromCluster: "b"}
	results := map[string]*Result{"a": {Restore: RestoreReport{Active: true, Phase: "Pending", Reason: fleetv1alpha1.ReasonBackupUnusable}}}
	pass := func() fleetv1alpha1.DatabaseStatus {
		st := fleetv1alpha1.DatabaseStatus{ObservedGeneration: 1, Conditions: append([]metav1.Condition(nil), db.Status.Conditions...)}
		meta.RemoveStatusCondition(&st.Conditions, fleetv1alpha1.ConditionStalled)
		SetCondition(&st, fleetv1alpha1.ConditionReconciling, metav1.ConditionTrue, fleetv1alpha1.ReasonProgressing, "members move")
		ApplyRestore(&st, db, results, []string{"a"})
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
