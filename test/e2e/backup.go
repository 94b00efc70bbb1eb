package e2e

import (
	"context"
	"testing"

	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// FinalBackupInput is the input of FinalBackupSpec.
type FinalBackupInput struct {
	T     testing.TB
	Fleet *Fleet
}

// FinalBackupSpec deletes two Ready Databases (StatefulSet backend,
// deletionPolicy Delete, spec.backup.finalBackup unset: Required) and proves:
// the one whose backup Jobs succeed (each member's Job controller runs
// them, kwok completes their pods) goes, its status having recorded a
// Succeeded final backup in every member, the backup volume claims stay and
// the Jobs are removed; the one whose backup pods fail (the test-only label
// fleetdb.io/test-fail-backup, which the local fleet's kwok Stage fails)
// stays Deleting with FinalBackup=False/FinalBackupFailed and everything in
// its members, until `kubectl patch` sets finalBackup to Skip.
func FinalBackupSpec(ctx context.Context, in FinalBackupInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-backup"})
	DumpOnFailure(t, f, ns)
	members := f.MemberNames()

	newDB := func(name string, fail bool) client.ObjectKey {
		db := NewDatabase(ns, name, 1, members)
		db.Spec.Backend = fleetv1alpha1.BackendStatefulSet
		db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyDelete
		db.Spec.Backup = nil // the default: Required
		if fail {
			db.Labels = map[string]string{fleetv1alpha1.LabelTestFailBackup: "true"}
		}
		g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
		key := client.ObjectKeyFromObject(db)
		WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: key, Members: members, Replicas: 1})
		return key
	}
	good, bad := newDB("kept", false), newDB("stuck", true)

	// The failing one first: it holds.
	g.Expect(f.Hub.Client.Delete(ctx, &fleetv1alpha1.Database{ObjectMeta: GetDatabase(ctx, g, f, bad).ObjectMeta})).To(Succeed())
	out, err := kubectl(ctx, f, "-n", ns, "wait", "database/"+bad.Name,
		`--for=jsonpath={.status.conditions[?(@.type=="FinalBackup")].reason}=`+fleetv1alpha1.ReasonFinalBackupFailed, "--timeout="+f.Intervals.Ready.String())
	g.Expect(err).NotTo(HaveOccurred(), "kubectl wait: %s", out)
	cur := GetDatabase(ctx, g, f, bad)
	g.Expect(cur.Status.Phase).To(Equal(fleetv1alpha1.PhaseDeleting))
	for _, m := range f.Members {
		g.Expect(m.Client.Get(ctx, bad, &appsv1.StatefulSet{})).To(Succeed(), "nothing is deleted in %s", m.Name)
		g.Expect(m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: bad.Name + "-credentials"}, &corev1.Secret{})).To(Succeed())
	}

	// The succeeding one goes, with its backups recorded on the way.
	DeleteDatabaseAndWait(ctx, DeleteDatabaseAndWaitInput{T: t, Fleet: f, Key: good})
	for _, m := range f.Members {
		var pvc corev1.PersistentVolumeClaim
		g.Expect(m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: member.BackupClaimName(good.Name)}, &pvc)).To(Succeed(), m.Name)
		g.Expect(pvc.DeletionTimestamp.IsZero()).To(BeTrue())
		var jobs batchv1.JobList
		g.Expect(m.Client.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{
			fleetv1alpha1.LabelBackupOfName: good.Name, fleetv1alpha1.LabelBackupKind: fleetv1alpha1.BackupKindFinal,
		})).To(Succeed())
		g.Expect(jobs.Items).To(BeEmpty(), "the hub removes the Jobs it recorded (%s)", m.Name)
	}
	g.Eventually(func(g Gomega) {
		out, err := kubectl(ctx, f, "-n", ns, "get", "events", "--field-selector", "reason=FinalBackupSucceeded", "-o", "name")
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).NotTo(BeEmpty(), "a FinalBackupSucceeded Event per member")
	}).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed())

	// The user releases the stuck one.
	out, err = kubectl(ctx, f, "-n", ns, "patch", "database/"+bad.Name, "--type=merge", "-p", `{"spec":{"backup":{"finalBackup":"Skip"}}}`)
	g.Expect(err).NotTo(HaveOccurred(), "kubectl patch: %s", out)
	DeleteDatabaseAndWait(ctx, DeleteDatabaseAndWaitInput{T: t, Fleet: f, Key: bad})
}
