package sharding

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded/sharder"
)

// labelShardPeer marks the replicas' peer Leases.
const labelShardPeer = "fleetdb.io/shard-peer"

// peerForgetAfter is how long after its expiry a dead replica's peer Lease is
// deleted (each process has a new identity, so restarts would pile them up).
const peerForgetAfter = 10 * ShardPeerTTL

// peerRegistry is this replica's liveness and its view of the others': it
// renews this replica's peer Lease every ShardPeerRenew (the one write a
// sharded replica makes at rest) and lists the live peers; the Lease is
// deleted on a clean stop, so the others rebalance at once.
type peerRegistry struct {
	c         client.Client
	namespace string
	self      sharder.PeerInfo
	log       logr.Logger
	// onChange is called when the live peers change; onStale when this
	// replica's Lease is no longer current (Current).
	onChange, onStale func()

	mu    sync.RWMutex
	peers []sharder.PeerInfo
	// last is the Lease as this replica last wrote it (the renewal loop's only).
	last *coordinationv1.Lease
	// renewed is the renewal time this replica last stored in its Lease.
	renewed time.Time
	stale   *time.Timer
}

func newPeerRegistry(c client.Client, namespace, self string, log logr.Logger) *peerRegistry {
	p := sharder.PeerInfo{ID: self, Weight: 1}
	return &peerRegistry{c: c, namespace: namespace, self: p, log: log, peers: []sharder.PeerInfo{p}}
}

func (r *peerRegistry) Self() sharder.PeerInfo { return r.self }

// Snapshot is the live peers (this replica among them) at the last listing.
func (r *peerRegistry) Snapshot() []sharder.PeerInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]sharder.PeerInfo(nil), r.peers...)
}

// Current tells whether this replica may act on its members: until
// shardActWindow after the renewal time it last stored, which is
// ShardPeerTTL-shardActWindow before another replica may see it expired.
func (r *peerRegistry) Current() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return !r.renewed.IsZero() && time.Now().Before(r.renewed.Add(shardActWindow))
}

// Run renews this replica's Lease every ShardPeerRenew until ctx ends,
// then deletes its Lease; the live peers are listed on their own ticker,
// so a slow listing never delays a renewal.
func (r *peerRegistry) Run(ctx context.Context) {
	listed := make(chan struct{})
	go func() {
		defer close(listed)
		t := time.NewTicker(ShardPeerRenew)
		defer t.Stop()
		for {
			if err := r.refresh(ctx); err != nil && ctx.Err() == nil {
				r.log.Info("Listing the peer Leases failed; retrying", "error", err.Error())
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	t := time.NewTicker(ShardPeerRenew)
	defer t.Stop()
	for {
		if err := r.renew(ctx); err != nil && ctx.Err() == nil {
			r.log.Info("Renewing this replica's peer Lease failed; retrying", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			<-listed
			r.mu.Lock()
			r.renewed = time.Time{}
			if r.stale != nil {
				r.stale.Stop()
			}
			r.mu.Unlock()
			dctx, cancel := context.WithTimeout(context.Background(), shardCallTimeout)
			_ = client.IgnoreNotFound(r.c.Delete(dctx, r.lease()))
			cancel()
			return
		case <-t.C:
		}
	}
}

func (r *peerRegistry) lease() *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Namespace: r.namespace, Name: peerLeaseName(r.self.ID),
		Labels: map[string]string{labelShardPeer: "true"},
	}}
}

func peerLeaseName(id string) string { return ShardPeerPrefix + "-" + id }

// renew stores a new renewal time in this replica's Lease: one update of
// the Lease as last written (one call, the renewal time taken before it),
// or a read first when there is none or that update failed.
func (r *peerRegistry) renew(ctx context.Context) error {
	l := r.last
	r.last = nil
	var err error
	if l == nil {
		l = r.lease()
		if err = r.c.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	now := metav1.NowMicro()
	l.Spec.HolderIdentity = ptr.To(r.self.ID)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(ShardPeerTTL / time.Second))
	l.Spec.RenewTime = &now
	if apierrors.IsNotFound(err) {
		err = r.c.Create(ctx, l)
	} else {
		err = r.c.Update(ctx, l)
	}
	if err != nil {
		return err
	}
	r.last = l
	r.mu.Lock()
	defer r.mu.Unlock()
	if ctx.Err() != nil {
		return nil
	}
	r.renewed = now.Time
	d := time.Until(now.Add(shardActWindow))
	if r.stale == nil {
		r.stale = time.AfterFunc(d, r.expire)
	} else {
		r.stale.Reset(d)
	}
	return nil
}

// expire runs when the Lease may no longer be current.
func (r *peerRegistry) expire() {
	if !r.Current() && r.onStale != nil {
		r.onStale()
	}
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
		if id == "" || id == r.self.ID {
			continue
		}
		switch expires, ok := leaseExpiry(l); {
		case ok && now.Before(expires):
			live = append(live, sharder.PeerInfo{ID: id, Weight: 1})
		case ok && now.After(expires.Add(peerForgetAfter)):
			_ = client.IgnoreNotFound(r.c.Delete(ctx, l, client.Preconditions{ResourceVersion: &l.ResourceVersion}))
		}
	}
	slices.SortFunc(live, func(a, b sharder.PeerInfo) int { return strings.Compare(a.ID, b.ID) })
	r.mu.Lock()
	changed := !slices.Equal(peerIDs(live), peerIDs(r.peers))
	r.peers = live
	r.mu.Unlock()
	if changed {
		r.log.Info("Live peers changed", "peers", peerIDs(live))
		if r.onChange != nil {
			r.onChange()
		}
	}
	return nil
}

// live reads peer id's Lease now: whether it is live (false when gone).
func (r *peerRegistry) live(ctx context.Context, id string) (bool, error) {
	l := &coordinationv1.Lease{}
	err := r.c.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: peerLeaseName(id)}, l)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	expires, ok := leaseExpiry(l)
	return ok && ptr.Deref(l.Spec.HolderIdentity, "") == id && time.Now().Before(expires), nil
}

// leaseExpiry is when a Lease expires: its renewal plus its duration.
func leaseExpiry(l *coordinationv1.Lease) (time.Time, bool) {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return time.Time{}, false
	}
	return l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second), true
}
