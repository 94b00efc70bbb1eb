package member

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// The PrimaryStandby wiring of a CloudNativePG Cluster (Params.Topology):
// replica.{self,primary,source[,promotionToken]}, one externalClusters
// entry per member, a bootstrap that streams a standby from the primary,
// and certificates from the Database's CA (issued by the hub) so that a
// standby verifies the primary's server certificate (sslmode verify-full)
// and authenticates as streaming_replica with a client certificate.

// Key names in the certificate Secrets, as CloudNativePG reads them.
const (
	// TLSCAKey holds the CA certificate (CloudNativePG's serverCASecret and
	// clientCASecret: only the certificate is needed when serverTLSSecret and
	// replicationTLSSecret are given, so the CA key never leaves the hub).
	TLSCAKey = "ca.crt"
	// TLSCertKey and TLSKeyKey are kubernetes.io/tls Secrets' keys.
	TLSCertKey = corev1.TLSCertKey
	TLSKeyKey  = corev1.TLSPrivateKeyKey
	// ReplicationUser is CloudNativePG's streaming replication user, the CN
	// of the replication client certificate.
	ReplicationUser = "streaming_replica"
)

// TopologyCASecretName is the member Secret with the Database's CA certificate (ca.crt).
func TopologyCASecretName(db string) string { return db + "-topology-ca" }

// TopologyServerSecretName is the member's kubernetes.io/tls server certificate Secret.
func TopologyServerSecretName(db string) string { return db + "-topology-server" }

// TopologyReplicationSecretName is the kubernetes.io/tls client certificate
// Secret of the streaming_replica user.
func TopologyReplicationSecretName(db string) string { return db + "-topology-replication" }

// ServerDNSNames are the in-cluster names of a Database's primary in a
// member, which its server certificate carries besides the peer host: the
// client Service "<name>" and CloudNativePG's "<name>-rw", "-ro" and "-r",
// each short, with the namespace, and with ".svc".
func ServerDNSNames(namespace, name string) []string {
	var out []string
	for _, svc := range []string{name, name + "-rw", name + "-ro", name + "-r"} {
		out = append(out, svc, svc+"."+namespace, svc+"."+namespace+".svc")
	}
	return out
}

// checkTopology refuses a wiring Render cannot turn into a valid Cluster.
func checkTopology(t *Topology) error {
	if t == nil {
		return nil
	}
	if t.Self == "" || t.Primary == "" {
		return errors.New("topology: self and primary are required")
	}
	has := func(name string) bool {
		return slices.ContainsFunc(t.Peers, func(p Peer) bool { return p.Name == name })
	}
	if !has(t.Self) || !has(t.Primary) {
		return fmt.Errorf("topology: %q and %q must both be peers", t.Self, t.Primary)
	}
	for _, p := range t.Peers {
		if p.Name == "" || p.Host == "" || p.Port <= 0 {
			return fmt.Errorf("topology: peer %q has no name, host or port", p.Name)
		}
	}
	c := t.Certificates
	for _, b := range [][]byte{c.CACert, c.ServerCert, c.ServerKey, c.ReplicationCert, c.ReplicationKey} {
		if len(b) == 0 {
			return errors.New("topology: the certificates are incomplete")
		}
	}
	return nil
}

// topologySecrets are the certificate Secrets of a PrimaryStandby member:
// the CA certificate, the member's server certificate and the replication
// client certificate.
func (r renderer) topologySecrets() []client.Object {
	c := r.p.Topology.Certificates
	ca := r.tlsSecret(TopologyCASecretName(r.db.Name), corev1.SecretTypeOpaque, map[string][]byte{TLSCAKey: c.CACert})
	server := r.tlsSecret(TopologyServerSecretName(r.db.Name), corev1.SecretTypeTLS,
		map[string][]byte{TLSCertKey: c.ServerCert, TLSKeyKey: c.ServerKey})
	repl := r.tlsSecret(TopologyReplicationSecretName(r.db.Name), corev1.SecretTypeTLS,
		map[string][]byte{TLSCertKey: c.ReplicationCert, TLSKeyKey: c.ReplicationKey})
	return []client.Object{ca, server, repl}
}

func (r renderer) tlsSecret(name string, typ corev1.SecretType, data map[string][]byte) *corev1.Secret {
	for k, v := range data {
		data[k] = append([]byte(nil), v...)
	}
	s := &corev1.Secret{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion, "Secret"),
		ObjectMeta: r.meta(name),
		Type:       typ,
		Data:       data,
	}
	s.Labels[CNPGReloadLabel] = "true"
	return s
}

// wireTopology adds the PrimaryStandby fields to a Cluster spec. A standby
// bootstraps with pg_basebackup from the primary, the primary with initdb;
// CloudNativePG refuses a change of spec.bootstrap, so Apply keeps the
// bootstrap of an existing Cluster (see ApplyBody): the one chosen when the
// Cluster was created stays through every switchover.
func (r renderer) wireTopology(spec map[string]any) {
	t := r.p.Topology
	replica := map[string]any{"self": t.Self, "primary": t.Primary, "source": replicaSource(t)}
	if t.PromotionToken != "" {
		replica["promotionToken"] = t.PromotionToken
	}
	spec["replica"] = replica
	spec["externalClusters"] = r.externalClusters()
	pg := map[string]any{"parameters": linkParameters(r.db)}
	if sync := synchronousConfig(t); sync != nil {
		pg["synchronous"] = sync
	}
	spec["postgresql"] = pg
	if t.Primary == t.Self && r.eff.replicas > 1 && len(t.SynchronousStandbys) > 0 {
		spec["failoverDelay"] = int64(NoLocalFailover)
	}
	// No serverAltDNSNames: CloudNativePG's webhook refuses them beside a
	// serverTLSSecret, on create and update (validateCerts in
	// internal/webhook/v1/cluster_webhook.go, v1.30.0). The server
	// certificate the hub issues carries the peer host and every in-cluster
	// name itself (ServerDNSNames).
	spec["certificates"] = map[string]any{
		"serverCASecret":       TopologyCASecretName(r.db.Name),
		"clientCASecret":       TopologyCASecretName(r.db.Name),
		"serverTLSSecret":      TopologyServerSecretName(r.db.Name),
		"replicationTLSSecret": TopologyReplicationSecretName(r.db.Name),
	}
	if t.Primary != t.Self {
		initdb, _, _ := unstructured.NestedMap(spec, "bootstrap", "initdb")
		basebackup := map[string]any{"source": t.Primary}
		for _, k := range []string{"database", "owner", "secret"} {
			if v, ok := initdb[k]; ok {
				basebackup[k] = v
			}
		}
		spec["bootstrap"] = map[string]any{"pg_basebackup": basebackup}
	}
}

// NoLocalFailover is the failoverDelay (seconds, CloudNativePG's largest:
// an int32) rendered on the primary member of a PrimaryStandby Database with
// durability Synchronous and more than one instance there: CloudNativePG
// never promotes one of the member's own standbys in its place. Those are
// asynchronous (maxStandbyNamesFromCluster 0, synchronousConfig), so the
// one CloudNativePG would promote (the most advanced of the member's own
// instances: reconcileTargetPrimaryForNonReplicaCluster in
// internal/controller/replicas.go, v1.30.0) can lack commits the other
// members' standbys acknowledged, and those would be lost. CloudNativePG
// waits failoverDelay after the primary failed before it fails over
// (enforceFailoverDelay, same file); its quorum check (failoverQuorum)
// cannot be used instead: the webhook requires number to exceed
// len(standbyNamesPre) (validateFailoverQuorum in
// internal/webhook/v1/cluster_webhook.go). A lost local primary then stops
// writes until it is back, or until a person fails over to another member,
// whose standby holds every acknowledged commit. A planned switchover inside
// the member (CloudNativePG moving the primary off a node being drained) is
// not a failover and still runs.
const NoLocalFailover = math.MaxInt32

// linkParameters are the PostgreSQL parameters of the replication
// connection between the members (spec.topology.link), on every member: a
// switchover makes a standby the primary, and the parameters are the
// sender's there and the receiver's on a standby. CloudNativePG's defaults
// (wal_sender_timeout and wal_receiver_timeout 5s, wal_keep_size 512MB:
// CnpgConfigurationSettings in pkg/postgres/configuration.go, v1.30.0) are
// meant for instances in one cluster; a user value replaces a default there,
// and none of these is a fixed parameter (FixedConfigurationParameters,
// same file). All three take effect on a reload.
func linkParameters(db *fleetv1alpha1.Database) map[string]any {
	timeout := fmt.Sprintf("%dms", db.EffectiveLinkTimeout().Milliseconds())
	return map[string]any{
		"wal_sender_timeout":   timeout,
		"wal_receiver_timeout": timeout,
		// Whole megabytes (wal_keep_size's unit), rounded up.
		"wal_keep_size": fmt.Sprintf("%dMB", (db.EffectiveWALKeepSize()+(1<<20)-1)>>20),
	}
}

// synchronousConfig is spec.postgresql.synchronous for a member whose
// commits wait for the standbys in the other members: quorum ("any") of all
// of the other members' designated primaries (number = how many there are),
// so that every standby a forced failover may promote holds every
// acknowledged commit (with "any 1" of two or more, a commit acknowledged by
// one standby alone is lost when another is promoted), named by the application_name
// each sets when it connects (StandbyApplicationName, in its externalClusters
// entries), and none of the member's own instances
// (maxStandbyNamesFromCluster 0: a local standby on the same node would
// otherwise acknowledge the commits of a primary cut off from the other
// members). dataDurability required: CloudNativePG then keeps the list as
// given instead of shrinking it to the healthy local instances
// (explicitSynchronousStandbyNamesDataDurabilityRequired in
// pkg/postgres/replication/explicit.go, v1.30.0); its webhook requires
// number < instances + len(standbyNamesPre) (validateSynchronousReplicaConfiguration
// in internal/webhook/v1/cluster_webhook.go, v1.30.0), which
// len(standbyNamesPre) always is (instances is at least 1).
// CloudNativePG's own connections set synchronous_commit=local
// (pkg/management/postgres/pool/profiles.go, v1.30.0), so its bootstrap and
// role reconciliation do not wait for the standbys.
func synchronousConfig(t *Topology) map[string]any {
	var names []any
	for _, m := range t.SynchronousStandbys {
		if m != t.Self {
			names = append(names, StandbyApplicationName(m))
		}
	}
	if len(names) == 0 {
		return nil
	}
	return map[string]any{
		"method":                     "any",
		"number":                     int64(len(names)),
		"maxStandbyNamesFromCluster": int64(0),
		"standbyNamesPre":            names,
		"dataDurability":             "required",
	}
}

// StandbyApplicationName is the application_name member m's designated
// primary connects to another member's primary with (its externalClusters
// entries' connectionParameters: CloudNativePG builds primary_conninfo of a
// replica cluster's designated primary from them, ConfigureConnectionToServer
// in pkg/management/external/external.go, v1.30.0): how a primary's
// pg_stat_replication and synchronous_standby_names tell the other members'
// standbys apart. The ':' keeps it from ever equalling a CloudNativePG
// instance name ("<cluster>-<n>", the application_name of the member's own
// standbys); it fits PostgreSQL's 63-byte names (a longer member name is
// cut and given a hash of the whole).
func StandbyApplicationName(m string) string {
	const prefix, limit = "fleetdb:", 63
	if len(prefix)+len(m) <= limit {
		return prefix + m
	}
	sum := sha256.Sum256([]byte(m))
	suffix := "-" + hex.EncodeToString(sum[:4])
	return prefix + m[:limit-len(prefix)-len(suffix)] + suffix
}

// replicaSource is replica.source: the primary for a standby, the member
// it streams from. A primary does not stream and CloudNativePG ignores the
// field there, but its webhook requires it to name an external cluster
// (validateReplicaClusterExternalClusters in
// internal/webhook/v1/cluster_webhook.go, v1.30.0); CloudNativePG's
// distributed topology documentation points a primary's source at a peer,
// the member it would stream from after a demotion: fleetdb names the first
// other member by name (itself only in a topology of one).
func replicaSource(t *Topology) string {
	if t.Primary != t.Self {
		return t.Primary
	}
	source := ""
	for _, p := range t.Peers {
		if p.Name != t.Self && (source == "" || p.Name < source) {
			source = p.Name
		}
	}
	if source == "" {
		return t.Self
	}
	return source
}

// externalClusters lists every member, sorted by name, as a standby
// connects to it: streaming_replica with the replication client
// certificate, verifying the server against the Database's CA.
func (r renderer) externalClusters() []any {
	peers := slices.Clone(r.p.Topology.Peers)
	slices.SortFunc(peers, func(a, b Peer) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	ref := func(name, key string) map[string]any { return map[string]any{"name": name, "key": key} }
	out := make([]any, 0, len(peers))
	for _, p := range peers {
		out = append(out, map[string]any{
			"name": p.Name,
			"connectionParameters": map[string]any{
				"host":    p.Host,
				"port":    strconv.Itoa(int(p.Port)),
				"user":    ReplicationUser,
				"dbname":  "postgres",
				"sslmode": "verify-full",
				// How the primary names this member's standby
				// (synchronousConfig).
				"application_name": StandbyApplicationName(r.p.Topology.Self),
			},
			"sslCert":     ref(TopologyReplicationSecretName(r.db.Name), TLSCertKey),
			"sslKey":      ref(TopologyReplicationSecretName(r.db.Name), TLSKeyKey),
			"sslRootCert": ref(TopologyCASecretName(r.db.Name), TLSCAKey),
		})
	}
	return out
}

// keepLiveBootstrap puts the live Cluster's spec.bootstrap into the apply
// body of an existing Cluster: CloudNativePG's bootstrap is immutable (a
// former standby keeps its pg_basebackup bootstrap after it was promoted).
func keepLiveBootstrap(body map[string]any, live client.Object) {
	cur, ok := live.(*unstructured.Unstructured)
	if !ok || cur.GroupVersionKind() != CNPGClusterGVK {
		return
	}
	if b, found, _ := unstructured.NestedFieldCopy(cur.Object, "spec", "bootstrap"); found {
		_ = unstructured.SetNestedField(body, b, "spec", "bootstrap")
	}
}

// ReadReplicationStatus is what a CloudNativePG Cluster says about its
// place in a PrimaryStandby topology.
func ReadReplicationStatus(u *unstructured.Unstructured) ReplicationStatus {
	s := readCNPGStatus(u)
	rs := ReplicationStatus{
		CurrentPrimary: s.currentPrimary,
		Healthy:        s.healthy(),
	}
	rs.Primary, _, _ = unstructured.NestedString(u.Object, "spec", "replica", "primary")
	rs.DemotionToken, _, _ = unstructured.NestedString(u.Object, "status", "demotionToken")
	rs.LastPromotionToken, _, _ = unstructured.NestedString(u.Object, "status", "lastPromotionToken")
	rs.SwitchInProgress, _, _ = unstructured.NestedBool(u.Object, "status", "switchReplicaClusterStatus", "inProgress")
	rs.SystemID, _, _ = unstructured.NestedString(u.Object, "status", "systemID")
	rs.RunsPrimary, rs.TimelineID, rs.UnreadInstances = reportedInstances(u, s.currentPrimary)
	return rs
}

// reportedInstances reads status.instancesReportedState: whether an
// instance reports itself a primary, the timeline the current (or
// designated) primary instance reports, and the instances whose state
// CloudNativePG could not read (see ReplicationStatus.UnreadInstances):
// those of status.instanceNames, and the current and target primary, that
// have no entry or one with timeLineID 0.
func reportedInstances(u *unstructured.Unstructured, current string) (runsPrimary bool, timeline int64, unread []string) {
	reported, _, _ := unstructured.NestedMap(u.Object, "status", "instancesReportedState")
	known, _, _ := unstructured.NestedStringSlice(u.Object, "status", "instanceNames")
	target, _, _ := unstructured.NestedString(u.Object, "status", "targetPrimary")
	for _, pod := range []string{current, target} {
		if pod != "" && !slices.Contains(known, pod) {
			known = append(known, pod)
		}
	}
	for pod, v := range reported {
		state, _ := v.(map[string]any)
		primary, _ := state["isPrimary"].(bool)
		runsPrimary = runsPrimary || primary
		if pod == current {
			timeline = reportedTimeline(state["timeLineID"])
		}
		if !slices.Contains(known, pod) {
			known = append(known, pod)
		}
	}
	for _, pod := range known {
		state, _ := reported[pod].(map[string]any)
		if state == nil || reportedTimeline(state["timeLineID"]) == 0 {
			unread = append(unread, pod)
		}
	}
	slices.Sort(unread)
	return runsPrimary, timeline, unread
}

// reportedTimeline reads an instance's timeLineID (an integer in JSON).
func reportedTimeline(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}

// cnpgRole is the member's role from its Cluster's spec.replica: Primary
// when replica.primary is replica.self, Standby otherwise; "" for a Cluster
// without a distributed topology.
func cnpgRole(u *unstructured.Unstructured) fleetv1alpha1.MemberRole {
	primary, _, _ := unstructured.NestedString(u.Object, "spec", "replica", "primary")
	self, _, _ := unstructured.NestedString(u.Object, "spec", "replica", "self")
	switch {
	case primary == "":
		return ""
	case self == "":
		self = u.GetName() // CloudNativePG's default for replica.self
	}
	if primary == self {
		return fleetv1alpha1.RolePrimary
	}
	return fleetv1alpha1.RoleStandby
}

// isTopologySecret reports whether obj is one of the certificate Secrets of
// the Database named db: a PrimaryStandby Database's, or the StatefulSet
// backend's instance TLS Secret.
func isTopologySecret(obj client.Object, db string) bool {
	if _, ok := obj.(*corev1.Secret); !ok {
		return false
	}
	switch obj.GetName() {
	case TopologyCASecretName(db), TopologyServerSecretName(db), TopologyReplicationSecretName(db), InstanceTLSSecretName(db):
		return true
	}
	return false
}

// deleteTopologySecrets deletes the Database's certificate Secrets (a Retain
// teardown keeps the credentials, not the certificates and their keys).
func deleteTopologySecrets(ctx context.Context, c client.Client, o Owner, memo *Memo) error {
	objs, err := listManaged(ctx, c, secretKind, o)
	if err != nil {
		return err
	}
	var errs []error
	for _, obj := range objs {
		if !isTopologySecret(obj, o.Name) || obj.GetDeletionTimestamp() != nil || memo.deleteSent(obj.GetUID()) {
			continue
		}
		if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting Secret %s/%s: %w", obj.GetNamespace(), obj.GetName(), err))
			continue
		}
		memo.markDeleted(obj.GetUID())
	}
	return errors.Join(errs...)
}
