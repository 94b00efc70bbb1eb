package backup

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// shardedBackupMessage is what a DatabaseBackup says on a sharded hub.
const shardedBackupMessage = "the hub runs with --sharding, which does not take DatabaseBackups yet " +
	"(its backup Jobs would be written from the leader into members other replicas own); " +
	"nothing ran; a hub without --sharding takes this backup up"

// SetupSharded registers, on a sharded hub (which runs no backup
// controller), the leader's controller that tells every unfinished
// DatabaseBackup so: Phase Pending, Stalled and not Ready with the reason
// ShardedHub, rather than a backup that silently never starts. It adds no
// finalizer and runs nothing in the members; the status is written once
// (an unchanged status is not written again), and a hub without --sharding
// later takes the backup up as a new one (it has no member records).
func SetupSharded(mgr mcmanager.Manager, opts Options) error {
	local := mgr.GetLocalManager()
	br := &backupReconciler{hub: local.GetClient()}
	return ctrl.NewControllerManagedBy(local).
		Named("databasebackup-sharded").
		For(&fleetv1alpha1.DatabaseBackup{}).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 1, SkipNameValidation: opts.SkipNameValidation,
			LogConstructor: telemetry.ReconcileLogs(local.GetLogger(), "databasebackup-sharded", func(req *reconcile.Request) []any {
				return []any{"databaseBackup", req.String()}
			}),
		}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			ctx, cancel := context.WithTimeout(ctx, opts.ReconcileTimeout)
			defer cancel()
			b := &fleetv1alpha1.DatabaseBackup{}
			if err := br.hub.Get(ctx, req.NamespacedName, b); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			if !b.DeletionTimestamp.IsZero() || b.Finished() || len(b.Status.Clusters) > 0 {
				// Deleting, finished, or begun by an unsharded hub: the
				// finalizer (if any) is the backup controller's to remove.
				return reconcile.Result{}, nil
			}
			st := *b.Status.DeepCopy()
			st.ObservedGeneration = b.Generation
			st.Phase = fleetv1alpha1.BackupPhasePending
			setBackupStalled(&st, fleetv1alpha1.ReasonShardedHub, shardedBackupMessage)
			setBackupCondition(&st, fleetv1alpha1.ConditionReady, false, fleetv1alpha1.ReasonShardedHub, shardedBackupMessage)
			return reconcile.Result{}, br.writeBackupStatus(ctx, b, st)
		}))
}
