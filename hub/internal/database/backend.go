package database

import (
	"context"
	"fmt"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/queue"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// backendChanged says why a Database's spec.backend cannot be acted on: it
// names another backend than the one its members run (set on a Database that
// ran on the StatefulSet backend before backends existed). fleetdb does not
// move data between backends; "" when there is nothing to say.
func backendChanged(db *fleetv1alpha1.Database) string {
	if db.Spec.Backend == "" || db.Spec.Backend == db.EffectiveBackend() {
		return ""
	}
	return fmt.Sprintf("spec.backend is %s but the members run this Database on the %s backend (recorded at its first placement); "+
		"fleetdb does not move data between backends: set spec.backend to %s, or create a new Database",
		db.Spec.Backend, db.EffectiveBackend(), db.EffectiveBackend())
}

// recordBackend records the backend of a Database that is being placed for
// the first time in its fleetdb.io/backend annotation (before the finalizer
// goes on; see Database.EffectiveBackend).
func recordBackend(db *fleetv1alpha1.Database) {
	if db.Annotations[fleetv1alpha1.AnnotationBackend] != "" {
		return
	}
	if db.Annotations == nil {
		db.Annotations = map[string]string{}
	}
	db.Annotations[fleetv1alpha1.AnnotationBackend] = string(db.EffectiveBackend())
}

// backendMissingStatus is a member's status when it does not offer the
// Database's backend.
func backendMissingStatus(cluster string, backend fleetv1alpha1.Backend) fleetv1alpha1.ClusterStatus {
	return fleetv1alpha1.ClusterStatus{
		Name:    cluster,
		Phase:   fleetv1alpha1.ClusterPhaseDegraded,
		Backend: backend,
		Reason:  fleetv1alpha1.ReasonBackendMissing,
		Message: statusmsg.Bound((&member.BackendMissingError{Backend: backend}).Error()),
	}
}

// backendWatches watches the CloudNativePG Clusters of each member that
// offers them, so that CloudNativePG's status reports and drift wake the
// member sync like the StatefulSet's events do. The watch is started on
// first use, not with the member: a member without CloudNativePG's CRDs
// could not sync a static watch of the kind, and would never engage.
type backendWatches struct {
	mu sync.Mutex
	// clusters holds, per member, the cluster whose cache has the watch (a
	// reconnect makes a new cluster, which needs its own).
	clusters map[string]cluster.Cluster
	queue    *queue.Ref
}

func newBackendWatches(queue *queue.Ref) *backendWatches {
	return &backendWatches{clusters: map[string]cluster.Cluster{}, queue: queue}
}

// ensure starts the Cluster watch in the member's cache once. It fails with
// a no-match error when the member serves no Cluster API.
func (w *backendWatches) ensure(ctx context.Context, name string, cl cluster.Cluster) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.clusters[name] == cl {
		return nil
	}
	inf, err := cl.GetCache().GetInformer(ctx, member.NewCNPGCluster())
	if err != nil {
		return err
	}
	enqueue := func(obj any) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		o, ok := obj.(client.Object)
		if !ok {
			return
		}
		for _, req := range databaseOfMemberObject(ctx, o) {
			w.queue.AddWith(name, req.NamespacedName, 0, 0)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	w.clusters[name] = cl
	return nil
}

// backendReady makes sure that the member can run db's backend; for
// CloudNativePG it starts the member's Cluster watch. It returns a
// *member.BackendMissingError when the member does not offer it.
func (r *memberSyncReconciler) backendReady(ctx context.Context, cluster string, cl cluster.Cluster, db *fleetv1alpha1.Database) error {
	backend := db.EffectiveBackend()
	if backend != fleetv1alpha1.BackendCloudNativePG {
		return nil
	}
	if offered, known := r.provider.Offers(cluster, backend); known && !offered {
		return &member.BackendMissingError{Backend: backend}
	}
	if err := r.watches.ensure(ctx, cluster, cl); err != nil {
		if member.IsBackendMissing(err) {
			return &member.BackendMissingError{Backend: backend}
		}
		return fmt.Errorf("watching CloudNativePG Clusters: %w", err)
	}
	return nil
}
