package database

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
	"github.com/fleetdb/fleetdb/hub/internal/hubsecret"
	"github.com/fleetdb/fleetdb/hub/internal/topology"
	"github.com/fleetdb/fleetdb/internal/pki"
	"github.com/fleetdb/fleetdb/member"
)

// reconcileTopologyWiring prepares what a PrimaryStandby Database's members
// need to stream from each other: every placed member's replication
// endpoint (MemberCluster spec.replication), the certificates from the
// Database's CA (hubsecret.EnsureTopologyPKI), and each member's member.Topology
// (topologyFor), which the plan carries to the member syncs.
//
// A primaryCluster that is not placed stalls the Database (PrimaryNotPlaced);
// a placed member without a replication endpoint makes it wait (no requeue:
// a MemberCluster change wakes it). The certificates are looked at again when
// the first of them is due for renewal.
func (r *databaseReconciler) reconcileTopologyWiring(ctx context.Context, s *databaseScope) (ctrl.Result, error) {
	s.topology = nil
	if s.db.TopologyMode() != fleetv1alpha1.TopologyPrimaryStandby {
		return ctrl.Result{}, nil
	}
	if primary := s.db.Spec.Topology.PrimaryCluster; !s.targets[primary] {
		return ctrl.Result{}, s.stall(fleetv1alpha1.ReasonPrimaryNotPlaced, fmt.Errorf(
			"spec.topology.primaryCluster %q is not one of the members the placement selects (%s)", primary, strings.Join(s.placement.Targets, ", ")))
	}
	peers, missing, err := r.replicationPeers(ctx, s.db, s.placement.Targets)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(missing) > 0 {
		st := dbstatus.Waiting(s.db, fleetv1alpha1.ReasonWaitingForReplicationEndpoint, fmt.Sprintf(
			"members %s have no spec.replication in their MemberCluster: the other members could not reach them; "+
				"the platform team sets it (see docs/topology.md, \"Wiring and prerequisites\")", strings.Join(missing, ", ")))
		s.status = &st
		return ctrl.Result{}, errStopPhases
	}
	hosts := map[string]string{}
	for _, p := range peers {
		hosts[p.Name] = p.Host
	}
	certs, err := hubsecret.EnsureTopologyPKI(ctx, r.hub, r.live, s.db, hosts, r.now())
	var broken pki.Error
	switch {
	case errors.As(err, &broken):
		return ctrl.Result{}, s.stall(fleetv1alpha1.ReasonTopologyCertificates, err)
	case err != nil:
		return ctrl.Result{}, err
	}
	if len(certs.Issued) > 0 {
		r.recorder.Eventf(s.db, nil, corev1.EventTypeNormal, "CertificatesIssued", "Topology",
			"issued replication certificates from the Database's CA: %s", strings.Join(certs.Issued, ", "))
	}
	s.topology = map[string]*member.Topology{}
	for _, name := range s.placement.Targets {
		s.topology[name] = topologyFor(s.db, name, peers, certs.Certs[name])
	}
	return ctrl.Result{RequeueAfter: untilRenewal(certs.Renew, r.now())}, nil
}

// untilRenewal is the requeue that brings the reconcile back when the first
// certificate is due for renewal (at least a minute away).
func untilRenewal(renew, now time.Time) time.Duration {
	return max(renew.Sub(now), time.Minute)
}

// topologyFor is the member.Topology of one member of a PrimaryStandby
// Database at creation and at rest: it follows the primary the hub last
// promoted (status.topology.primaryCluster) or, before there is one,
// spec.topology.primaryCluster, with no promotion token. The hub's
// switchover phase replaces Primary and PromotionToken while it runs.
func topologyFor(db *fleetv1alpha1.Database, self string, peers []member.Peer, certs member.TopologyCertificates) *member.Topology {
	primary := db.Spec.Topology.PrimaryCluster
	if st := db.Status.Topology; st != nil && st.PrimaryCluster != "" {
		primary = st.PrimaryCluster
	}
	// The switchover (decideRole) says whom the member follows, and the
	// promotion token, from the stored status.
	role, decided := topology.DecideRole(db, self)
	if decided {
		primary = role.Primary
	}
	placed := make([]string, 0, len(peers))
	for _, p := range peers {
		placed = append(placed, p.Name)
	}
	return &member.Topology{
		Self:           self,
		Primary:        primary,
		PromotionToken: role.PromotionToken,
		// Commits wait for the other members' standbys (durability Synchronous).
		SynchronousStandbys: topology.SynchronousStandbys(db, self, placed),
		Peers:               slices.Clone(peers),
		Certificates:        certs,
	}
}

// replicationPeers are the placed members as the others reach them, in
// placement order; missing are the members without spec.replication (or
// whose MemberCluster is gone).
func (r *databaseReconciler) replicationPeers(ctx context.Context, db *fleetv1alpha1.Database, targets []string) (peers []member.Peer, missing []string, err error) {
	var list fleetv1alpha1.MemberClusterList
	if err := r.hub.List(ctx, &list); err != nil {
		return nil, nil, fmt.Errorf("listing member clusters: %w", err)
	}
	byName := map[string]*fleetv1alpha1.MemberCluster{}
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	for _, name := range targets {
		mc := byName[name]
		if mc == nil || mc.Spec.Replication == nil {
			missing = append(missing, name)
			continue
		}
		ep := mc.Spec.Replication
		peers = append(peers, member.Peer{Name: name, Host: ep.Host(db.Namespace, db.Name), Port: ep.EffectivePort()})
	}
	return peers, missing, nil
}
