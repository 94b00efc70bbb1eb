package member

// This file is the contract between the hub's topology phase (which decides,
// per member, whom its CloudNativePG Cluster follows and when it is promoted)
// and the member renderer (which turns that into the Cluster's replica,
// externalClusters, bootstrap and certificates fields).

// Topology is the PrimaryStandby wiring of one member's CloudNativePG
// Cluster, decided by the hub. Nil for an Independent Database.
type Topology struct {
	// Self is this member's name: its entry in externalClusters and
	// replica.self.
	Self string
	// Primary is the member this Cluster treats as the primary
	// (replica.primary): Self on the primary, the primary member on a
	// standby. Setting it to another member on the current primary demotes
	// it (CloudNativePG then publishes status.demotionToken).
	Primary string
	// PromotionToken is set only on the member being promoted in a planned
	// switchover, in the same write that sets Primary to Self
	// (replica.promotionToken). Empty for a forced promotion.
	PromotionToken string
	// Peers are every placed member (Self included), by name, with the
	// address a standby in another member uses to reach its primary.
	Peers []Peer
	// Certificates are the PEM certificates (and this member's keys) the
	// Cluster uses for replication between the members, issued by the hub
	// from one CA per Database. The CA's private key is never here.
	Certificates TopologyCertificates
}

// TopologyCertificates are the PEM data Render writes into the member's
// certificate Secrets (see TopologyCASecretName and the others).
type TopologyCertificates struct {
	// CACert is the Database's CA certificate: it signed every member's
	// server certificate and the replication client certificate.
	CACert []byte
	// ServerCert and ServerKey are this member's server certificate (for
	// its peer host and its in-cluster Service names) and private key.
	ServerCert, ServerKey []byte
	// ReplicationCert and ReplicationKey are the client certificate of the
	// streaming_replica user and its private key.
	ReplicationCert, ReplicationKey []byte
}

// Peer is one member of a PrimaryStandby topology as the others reach it.
type Peer struct {
	// Name is the MemberCluster name (the externalClusters entry name).
	Name string
	// Host and Port reach the member's primary from other members.
	Host string
	Port int32
}

// ReplicationStatus is what a member's CloudNativePG Cluster says about its
// place in a PrimaryStandby topology (read by the hub's topology phase).
type ReplicationStatus struct {
	// Primary is the Cluster's spec.replica.primary as the member has it.
	Primary string
	// DemotionToken is status.demotionToken (set once a demoted primary shut down cleanly).
	DemotionToken string
	// LastPromotionToken is status.lastPromotionToken (the token of the last promotion it completed).
	LastPromotionToken string
	// SwitchInProgress is status.switchReplicaClusterStatus.inProgress.
	SwitchInProgress bool
	// Healthy: phase "Cluster in healthy state", every instance ready, Ready not False.
	Healthy bool
	// CurrentPrimary is status.currentPrimary (the instance).
	CurrentPrimary string
}
