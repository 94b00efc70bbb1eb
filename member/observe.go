package member

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// maxMessage bounds ClusterStatus.Message (the API allows 512 characters).
const maxMessage = 512

// Observe reports what the member runs for db, from its StatefulSet and client
// Service as c sees them; LastSyncTime is now. It decides between Pending (no
// StatefulSet yet), Provisioning and Ready; Unreachable and Conflict are the
// hub's to decide. When a StatefulSet of that name exists but is not
// fleetdb's, Observe returns a Pending status and a *ConflictError rather than
// reporting someone else's workload.
//
// ObservedGeneration is the hub generation that last wrote the StatefulSet,
// but only once the StatefulSet controller has caught up with it (observed its
// generation, updated every replica and finished the rollout); before that it
// is 0, since which generation the pods run is not known.
func Observe(ctx context.Context, c client.Reader, db *fleetv1alpha1.Database, cluster string) (fleetv1alpha1.ClusterStatus, error) {
	now := metav1.Now()
	st := fleetv1alpha1.ClusterStatus{Name: cluster, Phase: fleetv1alpha1.ClusterPhasePending, LastSyncTime: &now}
	if db.EffectiveBackend() == fleetv1alpha1.BackendCloudNativePG {
		return observeCNPG(ctx, c, db, st)
	}
	st.Backend = fleetv1alpha1.BackendStatefulSet

	sts := &appsv1.StatefulSet{}
	err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, sts)
	switch {
	case apierrors.IsNotFound(err):
		st.Message = "the StatefulSet does not exist yet"
		return st, nil
	case err != nil:
		return st, fmt.Errorf("reading StatefulSet %s/%s: %w", db.Namespace, db.Name, err)
	case !ownedBy(sts.Labels, db.Namespace, db.Name):
		st.Message = fmt.Sprintf("StatefulSet %s/%s is not managed by fleetdb", db.Namespace, db.Name)
		return st, &ConflictError{Kind: "StatefulSet", Namespace: db.Namespace, Name: db.Name}
	}

	st.Replicas = 1
	if sts.Spec.Replicas != nil {
		st.Replicas = *sts.Spec.Replicas
	}
	st.ReadyReplicas = sts.Status.ReadyReplicas
	st.Version = imageTag(sts, string(db.Spec.Engine))

	endpoint, err := observeEndpoint(ctx, c, db)
	if err != nil {
		return st, err
	}
	st.Endpoint = endpoint

	caughtUp, why := rolledOut(sts)
	if caughtUp {
		st.ObservedGeneration, _ = strconv.ParseInt(sts.Annotations[fleetv1alpha1.AnnotationGeneration], 10, 64)
	}
	switch {
	case sts.DeletionTimestamp != nil:
		st.Phase, st.Message = fleetv1alpha1.ClusterPhaseProvisioning, "the StatefulSet is being deleted"
	case !caughtUp:
		st.Phase, st.Message = fleetv1alpha1.ClusterPhaseProvisioning, why
	case st.ReadyReplicas != st.Replicas:
		st.Phase = fleetv1alpha1.ClusterPhaseProvisioning
		st.Message = fmt.Sprintf("%d of %d replicas are ready", st.ReadyReplicas, st.Replicas)
	default:
		st.Phase = fleetv1alpha1.ClusterPhaseReady
	}
	if st.Phase == fleetv1alpha1.ClusterPhaseReady && endpoint == "" {
		st.Phase, st.Message = fleetv1alpha1.ClusterPhaseProvisioning, "the client Service does not exist yet"
	}
	st.Message = boundMessage(st.Message)
	return st, nil
}

// rolledOut reports whether the StatefulSet controller has caught up with the
// StatefulSet's spec, and if not, why.
func rolledOut(sts *appsv1.StatefulSet) (bool, string) {
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	s := sts.Status
	switch {
	case s.ObservedGeneration < sts.Generation:
		return false, fmt.Sprintf("the StatefulSet controller has not observed generation %d yet", sts.Generation)
	case s.UpdatedReplicas != replicas:
		return false, fmt.Sprintf("rolling out: %d of %d replicas updated", s.UpdatedReplicas, replicas)
	case s.UpdateRevision != "" && s.CurrentRevision != s.UpdateRevision:
		return false, "rolling out: waiting for the update revision to become current"
	}
	return true, ""
}

// observeEndpoint is "<service>.<namespace>.svc:<port>" of the client Service,
// or "" while it does not exist.
func observeEndpoint(ctx context.Context, c client.Reader, db *fleetv1alpha1.Database) (string, error) {
	svc := &corev1.Service{}
	err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, svc)
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading Service %s/%s: %w", db.Namespace, db.Name, err)
	case !ownedBy(svc.Labels, db.Namespace, db.Name) || len(svc.Spec.Ports) == 0:
		return "", nil
	}
	return fmt.Sprintf("%s.%s.svc:%d", svc.Name, svc.Namespace, svc.Spec.Ports[0].Port), nil
}

// imageTag is the tag of the engine container's image: the version it runs.
func imageTag(sts *appsv1.StatefulSet, container string) string {
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name != container {
			continue
		}
		image, _, _ := strings.Cut(c.Image, "@")
		if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
			return image[i+1:]
		}
	}
	return ""
}
