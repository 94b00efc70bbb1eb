package member

// This file is a stand-in until the CloudNativePG topology renderer
// (externalClusters, certificates, pg_basebackup bootstrap) lands: it only
// writes the replica stanza that the hub's switchover drives.

// replicaStanza is spec.replica for a member of a PrimaryStandby topology:
// whom the Cluster follows (itself on the primary) and, on the member being
// promoted in a switchover, the old primary's demotion token.
func replicaStanza(t *Topology) map[string]any {
	source := t.Primary
	if source == t.Self {
		// The primary names a peer as its source: CloudNativePG streams from
		// it once the Cluster is demoted.
		for _, p := range t.Peers {
			if p.Name != t.Self {
				source = p.Name
				break
			}
		}
	}
	replica := map[string]any{"self": t.Self, "primary": t.Primary, "source": source}
	if t.PromotionToken != "" {
		replica["promotionToken"] = t.PromotionToken
	}
	return replica
}
