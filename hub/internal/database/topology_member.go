package database

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/topology"
	"github.com/fleetdb/fleetdb/member"
)

// The member sync's part of the PrimaryStandby topology: render each
// member's Cluster from the decision the stored status holds, and report
// what the Cluster says back to the topology phase.

// topologyRoles fingerprints every placed member's rendered role (see plan.roles).
func topologyRoles(db *fleetv1alpha1.Database, targets []string, wiring map[string]*member.Topology) map[string]string {
	if db.TopologyMode() != fleetv1alpha1.TopologyPrimaryStandby {
		return nil
	}
	out := make(map[string]string, len(targets))
	for _, m := range targets {
		out[m] = topology.RoleKey(db, m)
		if w := wiring[m]; w != nil && w.ReportRequest != "" {
			// A new report request is rendered at once (topology.ReportRequest).
			out[m] += "/report:" + w.ReportRequest
		}
	}
	return out
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
	rs := member.ReadReplicationStatus(u)
	return &rs, nil
}
