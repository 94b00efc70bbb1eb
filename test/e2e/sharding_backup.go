package e2e

import (
	"context"
	"testing"

	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// expectShardedBackupRefused: a sharded hub takes no DatabaseBackup, and
// says so: the backup of a Ready Database stays Pending, Stalled and not
// Ready with the reason ShardedHub, carries no finalizer, runs no Job in any
// member, and goes at once when deleted.
func expectShardedBackupRefused(ctx context.Context, t testing.TB, f *Fleet, db *fleetv1alpha1.Database) {
	g := NewWithT(t)
	b := &fleetv1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name + "-snap"},
		Spec:       fleetv1alpha1.DatabaseBackupSpec{DatabaseName: db.Name, DeletionPolicy: fleetv1alpha1.BackupDeletionDelete},
	}
	g.Expect(f.Hub.Client.Create(ctx, b)).To(Succeed())
	key := client.ObjectKeyFromObject(b)
	g.Eventually(func(g Gomega) {
		got := &fleetv1alpha1.DatabaseBackup{}
		g.Expect(f.Hub.Client.Get(ctx, key, got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(fleetv1alpha1.BackupPhasePending))
		stalled := meta.FindStatusCondition(got.Status.Conditions, fleetv1alpha1.ConditionStalled)
		g.Expect(stalled).NotTo(BeNil())
		g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(stalled.Reason).To(Equal(fleetv1alpha1.ReasonShardedHub))
		g.Expect(stalled.Message).To(ContainSubstring("--sharding"))
		g.Expect(meta.IsStatusConditionFalse(got.Status.Conditions, fleetv1alpha1.ConditionReady)).To(BeTrue())
		g.Expect(got.Finalizers).To(BeEmpty())
		g.Expect(got.Status.Clusters).To(BeEmpty())
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed(),
		"a sharded hub says it does not take the DatabaseBackup")
	for _, m := range f.Members {
		var jobs batchv1.JobList
		g.Expect(m.Client.List(ctx, &jobs, client.InNamespace(db.Namespace))).To(Succeed())
		g.Expect(jobs.Items).To(BeEmpty(), "no backup Job in %s", m.Name)
	}
	g.Expect(f.Hub.Client.Delete(ctx, b)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(f.Hub.Client.Get(ctx, key, &fleetv1alpha1.DatabaseBackup{}))
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(BeTrue(), "the DatabaseBackup goes when deleted")
}
