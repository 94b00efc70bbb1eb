package hub

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// The member sync's part of the PrimaryStandby topology: render each
// member's Cluster from the decision the stored status holds, and report
// what the Cluster says back to the topology phase.

// topologyRoles fingerprints every placed member's rendered role (see plan.roles).
func topologyRoles(db *fleetv1alpha1.Database, targets []string) map[string]string {
	if db.TopologyMode() != fleetv1alpha1.TopologyPrimaryStandby {
		return nil
	}
	out := make(map[string]string, len(targets))
	for _, m := range targets {
		out[m] = roleKey(db, m)
	}
	return out
}

// memberTopology is the member.Topology the member's Cluster is rendered
// with; nil for an Independent Database.
func memberTopology(db *fleetv1alpha1.Database, cluster string, p *plan) *member.Topology {
	role, ok := decideRole(db, cluster)
	if !ok {
		return nil
	}
	t := &member.Topology{Self: cluster, Primary: role.Primary, PromotionToken: role.PromotionToken}
	for _, m := range sortedKeys(p.targets) {
		t.Peers = append(t.Peers, member.Peer{Name: m})
	}
	return t
}

// observeReplication reads what the member's Cluster says about its place
// in the topology (from the member cache the Cluster watch fills); nil for
// an Independent Database or when there is no Cluster yet.
func observeReplication(ctx context.Context, c client.Reader, db *fleetv1alpha1.Database) (*member.ReplicationStatus, error) {
	if db.TopologyMode() != fleetv1alpha1.TopologyPrimaryStandby {
		return nil, nil
	}
	u := member.NewCNPGCluster()
	if err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading Cluster %s/%s: %w", db.Namespace, db.Name, err)
	}
	rs := readReplication(u)
	return &rs, nil
}

// readReplication reads a CloudNativePG Cluster's replication fields.
func readReplication(u *unstructured.Unstructured) member.ReplicationStatus {
	var s member.ReplicationStatus
	s.Primary, _, _ = unstructured.NestedString(u.Object, "spec", "replica", "primary")
	s.DemotionToken, _, _ = unstructured.NestedString(u.Object, "status", "demotionToken")
	s.LastPromotionToken, _, _ = unstructured.NestedString(u.Object, "status", "lastPromotionToken")
	s.SwitchInProgress, _, _ = unstructured.NestedBool(u.Object, "status", "switchReplicaClusterStatus", "inProgress")
	s.CurrentPrimary, _, _ = unstructured.NestedString(u.Object, "status", "currentPrimary")
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	instances, _, _ := unstructured.NestedInt64(u.Object, "spec", "instances")
	ready, _, _ := unstructured.NestedInt64(u.Object, "status", "readyInstances")
	readyCond := ""
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			readyCond, _ = m["status"].(string)
		}
	}
	s.Healthy = phase == "Cluster in healthy state" && ready == instances && readyCond != "False"
	return s
}

// sameReplication compares two observations.
func sameReplication(a, b *member.ReplicationStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
