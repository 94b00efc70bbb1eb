package sharding

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/multicluster-runtime/pkg/util/sanitize"
)

// fenceDuration is the duration written on a fence. A fence does not expire
// by itself (it is valid while its holder's peer Lease is live, and never
// renewed); the long duration keeps a replica of an earlier version, which
// renewed its fences and took an unrenewed one after 15 s, from taking it
// during a rollout.
const fenceDuration = 365 * 24 * time.Hour

// fences reads and writes the members' fence Leases for this replica.
type fences struct {
	c         client.Client
	namespace string
	self      string
	peers     *peerRegistry
}

// FenceName is the fence Lease of a member.
func FenceName(cluster string) string { return ShardFencePrefix + "-" + sanitize.DNS1123(cluster) }

// take makes this replica the fence's holder, by a create or an update at
// the resourceVersion read, when it is free, already this replica's, or
// held by a replica whose peer Lease (read after the fence) is expired or
// gone. Of two replicas taking one fence at once, one write fails.
func (f *fences) take(ctx context.Context, cluster string) bool {
	key := client.ObjectKey{Namespace: f.namespace, Name: FenceName(cluster)}
	l := &coordinationv1.Lease{}
	err := f.c.Get(ctx, key, l)
	now := metav1.NowMicro()
	spec := coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To(f.self), AcquireTime: &now, RenewTime: &now,
		LeaseDurationSeconds: ptr.To(int32(fenceDuration / time.Second)),
	}
	switch {
	case apierrors.IsNotFound(err):
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Spec: spec}
		return f.c.Create(ctx, l) == nil
	case err != nil:
		return false
	}
	if holder := ptr.Deref(l.Spec.HolderIdentity, ""); holder != "" && holder != f.self {
		// Read after the fence: a holder that took it again (by a write,
		// after renewing its peer Lease) before this read makes the
		// update below fail on the resourceVersion.
		if live, err := f.peers.live(ctx, holder); err != nil || live {
			return false
		}
	}
	l.Spec = spec
	return f.c.Update(ctx, l) == nil
}

// release clears the fence if this replica holds it (at the resourceVersion read).
func (f *fences) release(ctx context.Context, cluster string) error {
	l := &coordinationv1.Lease{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.namespace, Name: FenceName(cluster)}, l); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != f.self {
		return nil
	}
	l.Spec.HolderIdentity = ptr.To("")
	if err := f.c.Update(ctx, l); err != nil {
		return fmt.Errorf("fence %s: %w", l.Name, err)
	}
	return nil
}
