package sharding

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded/peers"
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded/sharder"
)

// labelShardPeer marks the replicas' peer Leases.
const labelShardPeer = "fleetdb.io/shard-peer"

// peerForgetAfter is how long after its expiry a dead replica's peer Lease is
// deleted (each process has a new identity, so restarts would pile them up).
const peerForgetAfter = 10 * ShardPeerTTL

// peerRegistry is the sharded coordinator's membership, as the library's
// Lease registry, with fleetdb's durations (the library pins a 30 s TTL
// renewed every 10 s: a dead replica's members would wait 40 s) and a
// Lease deleted on a clean stop, so the others rebalance at once.
type peerRegistry struct {
	c         client.Client
	namespace string
	self      sharder.PeerInfo
	log       logr.Logger

	mu    sync.RWMutex
	peers []sharder.PeerInfo
}

var _ peers.Registry = &peerRegistry{}

func newPeerRegistry(c client.Client, namespace, self string, log logr.Logger) *peerRegistry {
	p := sharder.PeerInfo{ID: self, Weight: 1}
	return &peerRegistry{c: c, namespace: namespace, self: p, log: log, peers: []sharder.PeerInfo{p}}
}

func (r *peerRegistry) Self() sharder.PeerInfo { return r.self }

func (r *peerRegistry) Snapshot() []sharder.PeerInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]sharder.PeerInfo(nil), r.peers...)
}

// Run renews this replica's Lease and lists the live peers every
// ShardPeerRenew until ctx ends, then deletes its Lease.
func (r *peerRegistry) Run(ctx context.Context) error {
	t := time.NewTicker(ShardPeerRenew)
	defer t.Stop()
	for {
		if err := r.renew(ctx); err != nil && ctx.Err() == nil {
			r.log.Info("Renewing this replica's peer Lease failed; retrying", "error", err.Error())
		}
		if err := r.refresh(ctx); err != nil && ctx.Err() == nil {
			r.log.Info("Listing the peer Leases failed; retrying", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), shardCallTimeout)
			_ = client.IgnoreNotFound(r.c.Delete(dctx, r.lease()))
			cancel()
			return nil
		case <-t.C:
		}
	}
}

func (r *peerRegistry) lease() *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Namespace: r.namespace, Name: ShardPeerPrefix + "-" + r.self.ID,
		Labels: map[string]string{labelShardPeer: "true"},
	}}
}

func (r *peerRegistry) renew(ctx context.Context) error {
	now := metav1.NowMicro()
	l := r.lease()
	err := r.c.Get(ctx, client.ObjectKeyFromObject(l), l)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	l.Spec.HolderIdentity = ptr.To(r.self.ID)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(ShardPeerTTL / time.Second))
	l.Spec.RenewTime = &now
	if apierrors.IsNotFound(err) {
		return r.c.Create(ctx, l)
	}
	return r.c.Update(ctx, l)
}

// refresh lists the peer Leases: a peer is live until its renewal plus its
// duration; this replica always is. Long-dead peers' Leases are deleted.
func (r *peerRegistry) refresh(ctx context.Context) error {
	var list coordinationv1.LeaseList
	if err := r.c.List(ctx, &list, client.InNamespace(r.namespace), client.MatchingLabels{labelShardPeer: "true"}); err != nil {
		return err
	}
	now := time.Now()
	live := []sharder.PeerInfo{r.self}
	for i := range list.Items {
		l := &list.Items[i]
		id := ptr.Deref(l.Spec.HolderIdentity, "")
		if id == "" || id == r.self.ID || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			continue
		}
		expires := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		switch {
		case now.Before(expires):
			live = append(live, sharder.PeerInfo{ID: id, Weight: 1})
		case now.After(expires.Add(peerForgetAfter)):
			_ = client.IgnoreNotFound(r.c.Delete(ctx, l, client.Preconditions{ResourceVersion: &l.ResourceVersion}))
		}
	}
	r.mu.Lock()
	r.peers = live
	r.mu.Unlock()
	return nil
}
