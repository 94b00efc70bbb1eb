package clusters

import (
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cluster"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// One cluster, one registration. Two MemberClusters whose kubeconfigs reach
// the same cluster (the same kube-system Namespace uid) would be two writers
// of one cluster's objects, and a placement removal under one name would
// delete what the other serves. The hub reads every member's identity before
// it engages it: of the registrations that read one identity the oldest
// (creationTimestamp, then name) is engaged, every other is refused (Joined
// and Ready False, reason DuplicateCluster naming the one in use) and, when
// engaged already (it connected first), disengaged. A refused registration
// retries with backoff, at once when the one in use is deleted.

// registered records the MemberCluster's creationTimestamp and the cluster
// identity its status records.
func (p *Provider) registered(mc *fleetv1alpha1.MemberCluster) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.members[mc.Name]
	if m == nil {
		m = &member{name: mc.Name}
		p.members[mc.Name] = m
	}
	m.created = mc.CreationTimestamp.Time
	if mc.Status.ClusterID != "" {
		m.recordedID = mc.Status.ClusterID
	}
}

// identity is the cluster identity of m: what its run read, else what its
// status records.
func (m *member) identity() string {
	if m.run != nil && m.run.clusterID != "" {
		return m.run.clusterID
	}
	return m.recordedID
}

// registeredBefore reports whether a's registration is older than b's.
func registeredBefore(a, b *member) bool {
	if !a.created.Equal(b.created) {
		return a.created.Before(b.created)
	}
	return a.name < b.name
}

// sameCluster returns, of m and the members with identity id (read by
// their run, or recorded in their status by an earlier run: a registration
// in use keeps its place across a hub restart, before it connects again),
// the one registered first, and the engaged members other than m that lose
// to m when m is first. p.mu must be held.
func (p *Provider) sameCluster(m *member, id string) (first *member, engagedLosers []*member) {
	first = m
	if id == "" {
		return first, nil
	}
	var others []*member
	for _, o := range p.members {
		if o == m || o.identity() != id {
			continue
		}
		others = append(others, o)
		if registeredBefore(o, first) {
			first = o
		}
	}
	if first != m {
		return first, nil
	}
	for _, o := range others {
		if o.run != nil && o.run.cl != nil {
			engagedLosers = append(engagedLosers, o)
		}
	}
	return first, engagedLosers
}

// duplicateFailure is the problem of a registration refused for other.
func duplicateFailure(id, other string) failure {
	return failure{
		reason: fleetv1alpha1.ReasonDuplicateCluster,
		message: fmt.Sprintf("this cluster (kube-system uid %s) is registered already as MemberCluster %s, which the hub uses; "+
			"it writes nothing through a second registration (delete one of them)", id, other),
	}
}

// evictee is an engaged registration to disengage for a duplicate.
type evictee struct {
	name string
	run  *run
	cl   cluster.Cluster
}

// retryDuplicatesOf lets the registrations refused for identity id connect
// again now (the one in use is gone).
func (p *Provider) retryDuplicatesOf(id string) {
	if id == "" {
		return
	}
	var names []string
	p.mu.Lock()
	for _, o := range p.members {
		r := o.run
		if r == nil || o.identity() != id || r.connectErr == nil || r.connectErr.reason != fleetv1alpha1.ReasonDuplicateCluster {
			continue
		}
		r.attempts, r.nextAttempt = 0, time.Time{}
		names = append(names, o.name)
	}
	p.mu.Unlock()
	for _, n := range names {
		p.enqueue(n)
	}
}
