package e2e

import (
	"context"
	"testing"

	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// OnDemandBackupInput is the input of OnDemandBackupSpec.
type OnDemandBackupInput struct {
	T     testing.TB
	Fleet *Fleet
}

// OnDemandBackupSpec takes an on-demand backup of a Ready Database
// (StatefulSet backend, one instance) in every member and restores it into a
// new Database: `kubectl wait` for the DatabaseBackup's Ready (a Job per
// member, run by the member's Job controller, its pod completed by kwok),
// every member's record Succeeded with its location; the new Database with
// spec.restoreFrom becomes Ready with Restored=True, every member having run
// its restore Job and carrying the restored marker on its credentials
// Secret; then deleting the DatabaseBackup (Delete) runs the cleanup Jobs
// and the object goes, the backup volume claims stay.
func OnDemandBackupSpec(ctx context.Context, in OnDemandBackupInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-ondemand"})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()

	src := NewDatabase(ns, "orders", 1, members)
	src.Spec.Backend = fleetv1alpha1.BackendStatefulSet
	g.Expect(f.Hub.Client.Create(ctx, src)).To(Succeed())
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: client.ObjectKeyFromObject(src), Members: members, Replicas: 1})

	b := &fleetv1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"},
		Spec:       fleetv1alpha1.DatabaseBackupSpec{DatabaseName: src.Name, DeletionPolicy: fleetv1alpha1.BackupDeletionDelete},
	}
	g.Expect(f.Hub.Client.Create(ctx, b)).To(Succeed())
	out, err := kubectl(ctx, f, "-n", ns, "wait", "databasebackup/snap", "--for=condition=Ready", "--timeout="+f.Intervals.Ready.String())
	g.Expect(err).NotTo(HaveOccurred(), "kubectl wait: %s", out)
	g.Expect(f.Hub.Client.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
	g.Expect(b.Status.Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded))
	g.Expect(b.Status.Clusters).To(HaveLen(len(members)))
	for _, rec := range b.Status.Clusters {
		g.Expect(rec.Phase).To(Equal(fleetv1alpha1.BackupPhaseSucceeded), rec.Cluster)
		g.Expect(rec.Location).To(HavePrefix("persistentvolumeclaim/orders-backups:/backups/"+ns+"/orders/"), rec.Cluster)
	}

	dst := NewDatabase(ns, "orders-copy", 1, members)
	dst.Spec.Backend = fleetv1alpha1.BackendStatefulSet
	dst.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: b.Name}
	g.Expect(f.Hub.Client.Create(ctx, dst)).To(Succeed())
	key := client.ObjectKeyFromObject(dst)
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: 1})
	got := GetDatabase(ctx, g, f, key)
	g.Expect(Condition(got.Status.Conditions, fleetv1alpha1.ConditionRestored).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(got.Status.Restore).To(HaveLen(len(members)))
	for _, m := range f.Members {
		var s corev1.Secret
		g.Expect(m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: dst.Name + "-credentials"}, &s)).To(Succeed())
		g.Expect(s.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationRestored, b.Name), m.Name)
		var jobs batchv1.JobList
		g.Expect(m.Client.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{fleetv1alpha1.LabelRestore: member.RestoreHash(string(got.UID))})).To(Succeed())
		g.Expect(jobs.Items).To(HaveLen(1), "one restore Job in %s", m.Name)
		g.Expect(jobs.Items[0].Status.Succeeded).To(BeEquivalentTo(1), m.Name)
		g.Expect(m.Client.Get(ctx, key, &corev1.Service{})).To(Succeed(), "the client Service in %s", m.Name)
	}

	g.Expect(f.Hub.Client.Delete(ctx, b)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(f.Hub.Client.Get(ctx, client.ObjectKeyFromObject(b), &fleetv1alpha1.DatabaseBackup{}))
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(BeTrue(), "the DatabaseBackup goes after its cleanup")
	for _, m := range f.Members {
		var pvc corev1.PersistentVolumeClaim
		g.Expect(m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: member.BackupClaimName(src.Name)}, &pvc)).To(Succeed(), "the backup volume claim stays in %s", m.Name)
		var jobs batchv1.JobList
		g.Expect(m.Client.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{
			fleetv1alpha1.LabelBackupOfName: src.Name, fleetv1alpha1.LabelBackupKind: fleetv1alpha1.BackupKindOnDemand,
		})).To(Succeed())
		for _, j := range jobs.Items {
			g.Expect(j.DeletionTimestamp).NotTo(BeNil(), "the backup's Jobs are removed in %s: %s", m.Name, j.Name)
		}
	}
}
