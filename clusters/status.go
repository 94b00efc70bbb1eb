package clusters

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// setStatus writes the view into mc.status and reports whether anything but
// lastProbeTime changed. lastProbeTime moves only together with such a change
// (see the package documentation: a fleet at rest makes zero writes).
func setStatus(mc *fleetv1alpha1.MemberCluster, v view) bool {
	changed := false
	for _, c := range []struct {
		typ string
		condition
	}{
		{fleetv1alpha1.MemberConditionJoined, v.joined},
		{fleetv1alpha1.MemberConditionReady, v.ready},
	} {
		if c.status == "" {
			continue
		}
		changed = meta.SetStatusCondition(&mc.Status.Conditions, metav1.Condition{
			Type:               c.typ,
			Status:             c.status,
			Reason:             c.reason,
			Message:            c.message,
			ObservedGeneration: mc.Generation,
		}) || changed
	}
	// Backends change only when the member's APIs do.
	if v.backends != nil && !slices.Equal(v.backends, mc.Status.Backends) {
		mc.Status.Backends = slices.Clone(v.backends)
		changed = true
	}
	if v.clusterID != "" && v.clusterID != mc.Status.ClusterID {
		mc.Status.ClusterID = v.clusterID
		changed = true
	}
	// An unreachable member keeps the last version it reported.
	if v.version != "" && v.version != mc.Status.KubernetesVersion {
		mc.Status.KubernetesVersion = v.version
		changed = true
	}
	if changed && !v.lastProbe.IsZero() {
		t := metav1.NewTime(v.lastProbe)
		mc.Status.LastProbeTime = &t
	}
	return changed
}

// writeStatus patches mc.status to the view when it changed. The provider is
// the only writer of MemberCluster.status, so a merge patch suffices.
func (p *Provider) writeStatus(ctx context.Context, mc *fleetv1alpha1.MemberCluster, v view) error {
	if !p.writesStatus() {
		return nil
	}
	orig := mc.DeepCopy()
	if !setStatus(mc, v) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, hubCallTimeout)
	defer cancel()
	if err := p.hub.Status().Patch(ctx, mc, client.MergeFrom(orig)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing MemberCluster status: %w", err)
	}
	return nil
}
