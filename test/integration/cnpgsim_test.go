package integration

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// cnpgSim plays CloudNativePG's replica-cluster switch on the members'
// Cluster objects (real CRDs, no operator): a Cluster is healthy; a current
// primary whose spec.replica.primary names another member demotes after a
// delay (status.demotionToken, a random string; switch no longer in
// progress); a standby whose spec.replica.primary names itself promotes
// with promotionToken == a demotion token it issued (status.lastPromotionToken)
// or, without a token, at once (a forced promotion). As CloudNativePG
// v1.30.0 does: status.lastPromotionToken is cleared once spec.replica has
// no promotionToken, and status.demotionToken once the Cluster is a primary
// (updateResourceStatus, internal/controller/cluster_status.go); a token
// rendered again after it was used and cleared puts the Cluster into phase
// "Cluster is unrecoverable and needs manual intervention" (the instance
// manager's verifyPromotionToken, internal/management/controller/
// instance_controller.go and instance_token.go: ShouldPromoteFromReplicaCluster
// in api/v1/cluster_funcs.go is true for any token other than
// lastPromotionToken, and an old token's timeline or LSN is behind the
// instance's, which pkg/promotiontoken/promotion_token.go refuses as not
// retryable). Knobs: frozen members are not touched at all; unhealthy
// members never turn healthy; a member whose demotion is held reports it in
// progress (switchReplicaClusterStatus.inProgress) and does not finish it.
//
// It reports what the hub's streaming check reads, as CloudNativePG v1.30.0
// does (updateClusterStatusThatRequiresInstancesState in
// internal/controller/cluster_status.go): status.instancesReportedState
// with one instance, <name>-1, its isPrimary (not in recovery) and
// timeLineID; status.timelineID only while it acts as a primary (the
// operator takes it from a primary instance only); status.systemID, one
// per Database (a standby is a pg_basebackup clone of the primary, which
// keeps the system identifier). Timelines follow PostgreSQL: a promotion
// starts a timeline above every one in use (findNewestTimeLine()+1 in
// StartupXLOG, src/backend/access/transam/xlog.c); a standby follows its
// primary's timeline switch (recovery_target_timeline 'latest', the default
// since PostgreSQL 12) at once, but reports it only from its next
// restartpoint: CloudNativePG's instance timeline is
// pg_control_checkpoint()'s timeline_id, the last checkpoint's on a primary
// and the last restartpoint's on a standby (fillStatusFromPrimary and
// fillStatusFromReplica, pkg/management/postgres/probes.go, v1.30.0), and a
// standby makes a restartpoint only at its checkpoint_timeout after it
// replayed the new primary's checkpoint (over 5 minutes on real nodes,
// docs/realnodes.md). Here a standby makes its restartpoint restartpoint
// after it began to replay a new timeline, unless its member's restartpoints
// are held (holdRestartpoints); a promoted primary reports its new timeline
// at once (as the real nodes showed). And a restartpoint is published only
// when the operator reconciles the Cluster, as CloudNativePG does: a healthy
// Cluster is reconciled only when something it watches changes
// (ClusterReconciler.SetupWithManager, internal/controller/
// cluster_controller.go, v1.30.0: For(&apiv1.Cluster{}) with no predicate,
// no SyncPeriod), so the sim reconciles a Cluster when it changed since it
// last looked (any write: the hub's, or its own status write, whose watch
// event makes the operator reconcile once more) or while a demotion is
// pending (the operator requeues itself every second during a switch).
// Nothing else makes it publish a restartpoint: the hub must ask
// (fleetdb.io/report-request). A Cluster's demotion token is
// CloudNativePG's: base64 of the demoted primary's pg_controldata as JSON
// (PgControldataTokenContent in pkg/utils/parser.go, generateDemotionToken in
// pkg/reconciler/replicaclusterswitch/shutdown_wal.go, v1.30.0), with the
// system identifier and the timeline of its shutdown checkpoint, and only a
// Cluster that acted as a primary publishes one (the switch starts only
// when an instance is a primary: containsPrimaryInstance,
// pkg/reconciler/replicaclusterswitch/reconciler.go). A member still acting as a primary when another is
// promoted without a token has diverged and never follows again:
// CloudNativePG demotes a former primary without pg_rewind
// (verifyPgDataCoherenceForPrimary in
// internal/management/controller/instance_startup.go, v1.30.0). A Cluster
// re-created under the same name (a new UID) is a fresh clone.
type cnpgSim struct {
	e     *env
	delay time.Duration

	mu       sync.Mutex
	acting   map[string]bool      // member/ns/name -> acts as primary
	demoteAt map[string]time.Time // when a pending demotion happens
	tokens   map[string]bool      // demotion tokens issued
	timeline map[string]int64     // member/ns/name -> the timeline it runs or replays
	reported map[string]int64     // member/ns/name -> its last checkpoint's or restartpoint's timeline
	replayed map[string]time.Time // member/ns/name -> when a standby began to replay a timeline it has not reported
	// restartpoint is how long after that a standby makes its restartpoint;
	// holdRestartpoint: members whose standbys make none.
	restartpoint     time.Duration
	holdRestartpoint map[string]bool
	lsn              int64           // the simulated WAL position, for the demotion tokens
	diverged         map[string]bool // member/ns/name -> cannot follow a new timeline
	// ahead: members whose standbys received WAL the others did not (in
	// flight when a primary was lost): a forced promotion of another member
	// diverges them too.
	ahead map[string]bool
	uids  map[string]types.UID // member/ns/name -> the Cluster it plays
	// seen is the resourceVersion of each Cluster (member/ns/name) when the
	// sim last looked: a new one is a reconcile.
	seen      map[string]string
	systemIDs map[string]string // ns/name -> the Database's system identifier
	frozen    map[string]bool
	unhealthy map[string]bool
	// blind: members whose operator cannot read its instances (a cut
	// between the operator and the pods, PostgreSQL still running).
	blind map[string]bool
	// holdDemotion: members whose demotion stays in progress.
	holdDemotion map[string]bool
	// used are the promotion tokens a promotion consumed; unrecoverable the
	// Clusters (member/ns/name) a used token was rendered on again.
	used          map[string]bool
	unrecoverable map[string]bool
}

// cnpgPhaseUnrecoverable is CloudNativePG's PhaseUnrecoverable (api/v1/cluster_types.go, v1.30.0).
const cnpgPhaseUnrecoverable = "Cluster is unrecoverable and needs manual intervention"

func newCNPGSim(e *env, delay time.Duration) *cnpgSim {
	return &cnpgSim{e: e, delay: delay, acting: map[string]bool{}, demoteAt: map[string]time.Time{},
		tokens: map[string]bool{}, timeline: map[string]int64{}, reported: map[string]int64{}, replayed: map[string]time.Time{},
		restartpoint: 2 * time.Second, holdRestartpoint: map[string]bool{}, diverged: map[string]bool{}, uids: map[string]types.UID{},
		systemIDs: map[string]string{}, seen: map[string]string{}, frozen: map[string]bool{}, unhealthy: map[string]bool{}, blind: map[string]bool{},
		holdDemotion: map[string]bool{}, used: map[string]bool{}, unrecoverable: map[string]bool{}, ahead: map[string]bool{}}
}

// holdDemotions keeps m's demotions in progress (on) or lets them finish.
func (s *cnpgSim) holdDemotions(m string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdDemotion[m] = on
}

// holdRestartpoints stops m's standbys from making restartpoints (on), so
// they keep reporting the timeline of their last one, or lets them make
// them again.
func (s *cnpgSim) holdRestartpoints(m string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdRestartpoint[m] = on
}

// reportedTimeline is the timeline m's Cluster for ns/name reports.
func (s *cnpgSim) reportedTimeline(m, ns, name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reported[m+"/"+ns+"/"+name]
}

// unrecoverableClusters are the Clusters (member/namespace/name) that went
// unrecoverable because a used promotion token was rendered on them again.
func (s *cnpgSim) unrecoverableClusters() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.unrecoverable {
		out = append(out, k)
	}
	return out
}

// actingPrimaries are the members whose Cluster for ns/name acts as a
// primary now.
func (s *cnpgSim) actingPrimaries(ns, name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for key, acting := range s.acting {
		m, db, _ := strings.Cut(key, "/")
		if acting && db == ns+"/"+name {
			out = append(out, m)
		}
	}
	return out
}

func (s *cnpgSim) freeze(m string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen[m] = on
}

// setBlind cuts m's operator off from its instances (on), as a network
// policy or a partition between the operator and the pods would, while
// PostgreSQL keeps running: CloudNativePG then reports each instance with
// isPrimary false and timeLineID 0 and no system identifier
// (updateClusterStatusThatRequiresInstancesState in
// internal/controller/cluster_status.go, v1.30.0), and starts no demotion,
// since it sees no primary instance (containsPrimaryInstance in
// pkg/reconciler/replicaclusterswitch/reconciler.go): an acting primary runs
// on as one.
func (s *cnpgSim) setBlind(m string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blind[m] = on
}

// setAhead has m's standbys hold WAL the other members' do not (on): a
// forced promotion of another member then leaves them on a timeline branch
// they can never leave (CloudNativePG runs no pg_rewind for a replica
// cluster), though they report healthy standbys.
func (s *cnpgSim) setAhead(m string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ahead[m] = on
}

func (s *cnpgSim) setUnhealthy(m string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unhealthy[m] = on
}

func (s *cnpgSim) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		for _, m := range s.e.fleet.Members {
			s.mu.Lock()
			frozen := s.frozen[m.Name]
			s.mu.Unlock()
			if frozen {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(member.CNPGClusterGVK.GroupVersion().WithKind("ClusterList"))
			if err := m.Client.List(cctx, list, client.MatchingLabels{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}); err == nil {
				for i := range list.Items {
					s.step(cctx, m.Name, m.Client, &list.Items[i])
				}
			}
			cancel()
		}
	}
}

// step plays one Cluster's transitions and writes its status when it changed.
func (s *cnpgSim) step(ctx context.Context, m string, c client.Client, u *unstructured.Unstructured) {
	self, _, _ := unstructured.NestedString(u.Object, "spec", "replica", "self")
	primary, _, _ := unstructured.NestedString(u.Object, "spec", "replica", "primary")
	token, _, _ := unstructured.NestedString(u.Object, "spec", "replica", "promotionToken")
	status, _, _ := unstructured.NestedMap(u.Object, "status")
	if status == nil {
		status = map[string]any{}
	}
	key := m + "/" + u.GetNamespace() + "/" + u.GetName()
	s.mu.Lock()
	_, demoting := s.demoteAt[key]
	reconciled := s.seen[key] != u.GetResourceVersion() || demoting
	s.seen[key] = u.GetResourceVersion()
	s.mu.Unlock()
	next := s.transition(m, u, self, primary, token, status, reconciled)
	s.mu.Lock()
	healthy := !s.unhealthy[m]
	unrecoverable := s.unrecoverable[key]
	s.mu.Unlock()
	next = cnpgReconciledStatus(ctx, c, u, next, healthy)
	if unrecoverable {
		// RegisterPhase keeps the phase until a person intervenes.
		next["phase"], next["phaseReason"] = cnpgPhaseUnrecoverable, "Promotion token content is not correct for current instance"
	}
	writeCNPGStatus(ctx, c, u, status, next)
}

// transition is CloudNativePG's replica switch, on a copy of status.
func (s *cnpgSim) transition(m string, u *unstructured.Unstructured, self, primary, token string, status map[string]any, reconciled bool) map[string]any {
	next := map[string]any{}
	for k, v := range status {
		next[k] = v
	}
	if self == "" {
		return next
	}
	db := u.GetNamespace() + "/" + u.GetName()
	key := m + "/" + db
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.report(key, db, u.GetName(), primary, next, reconciled)
	if s.uids[key] != u.GetUID() {
		// A new Cluster: bootstrapped with initdb (the primary) or cloned
		// from the primary with pg_basebackup.
		s.uids[key] = u.GetUID()
		s.acting[key] = primary == self
		// pg_basebackup's backup starts at a checkpoint of the primary.
		s.timeline[key] = max(1, s.timeline[primary+"/"+db])
		s.reported[key] = max(1, s.reported[primary+"/"+db])
		delete(s.replayed, key)
		s.diverged[key] = false
		delete(s.demoteAt, key)
	}
	if s.systemIDs[db] == "" {
		s.systemIDs[db] = randomSystemID()
	}
	acting := s.acting[key]
	if last, _ := next["lastPromotionToken"].(string); token != "" && token != last && s.used[token] {
		s.unrecoverable[key] = true
	}
	// null removes the field in the merge patch writeCNPGStatus sends.
	if _, ok := next["lastPromotionToken"]; ok && token == "" {
		next["lastPromotionToken"] = nil
	}
	if _, ok := next["demotionToken"]; ok && primary == self {
		next["demotionToken"] = nil
	}
	switch {
	case acting && primary != self:
		at, ok := s.demoteAt[key]
		if !ok && s.blind[m] {
			return next // no primary instance seen: no switch started
		}
		if !ok {
			s.demoteAt[key] = time.Now().Add(s.delay)
			next["switchReplicaClusterStatus"] = map[string]any{"inProgress": true}
			return next
		}
		if time.Now().Before(at) || s.holdDemotion[m] {
			return next
		}
		delete(s.demoteAt, key)
		t := s.demotionToken(key, db)
		s.tokens[t] = true
		next["demotionToken"] = t
		next["switchReplicaClusterStatus"] = map[string]any{"inProgress": false}
		s.acting[key] = false
	case !acting && primary == self && token == "":
		s.promote(key, db, true)
	case !acting && primary == self && s.tokens[token] && !s.used[token]:
		next["lastPromotionToken"] = token
		s.used[token] = true
		s.promote(key, db, false)
	}
	return next
}

// promote makes key act as a primary on a new timeline; a promotion without
// a token diverges every other member still acting as a primary, and every
// member whose standbys are ahead (setAhead).
func (s *cnpgSim) promote(key, db string, forced bool) {
	tl := int64(0)
	for other, t := range s.timeline {
		if _, d, _ := strings.Cut(other, "/"); d != db {
			continue
		}
		tl = max(tl, t)
		if m, _, _ := strings.Cut(other, "/"); forced && other != key && (s.acting[other] || s.ahead[m]) {
			s.diverged[other] = true
		}
	}
	s.timeline[key] = tl + 1
	s.reported[key] = tl + 1
	delete(s.replayed, key)
	s.acting[key] = true
}

// demotionToken is the token of key's shutdown checkpoint: its pg_controldata
// as CloudNativePG writes it (see cnpgSim). The shutdown checkpoint is on
// the timeline it ran as a primary.
func (s *cnpgSim) demotionToken(key, db string) string {
	s.lsn += 0x1000000
	s.reported[key] = s.timeline[key]
	raw, _ := json.Marshal(map[string]string{
		"latestCheckpointTimelineID":   strconv.FormatInt(s.timeline[key], 10),
		"redoWalFile":                  fmt.Sprintf("%08X%08X%08X", s.timeline[key], s.lsn>>32, (s.lsn&0xFFFFFFFF)>>24),
		"databaseSystemIdentifier":     s.systemIDs[db],
		"latestCheckpointREDOLocation": fmt.Sprintf("%X/%X", s.lsn>>32, s.lsn&0xFFFFFFFF),
		"timeOfLatestCheckpoint":       time.Now().UTC().Format("Mon Jan 2 15:04:05 2006"),
		"operatorVersion":              "1.30.0",
	})
	return base64.StdEncoding.EncodeToString(raw)
}

// report puts into next what CloudNativePG's status says of the instance
// (see cnpgSim): a standby follows its primary's timeline at once and
// reports it from its next restartpoint, in the operator's first reconcile
// after it.
func (s *cnpgSim) report(key, db, name, primary string, next map[string]any, reconciled bool) {
	acting := s.acting[key]
	if up := s.timeline[primary+"/"+db]; !acting && !s.diverged[key] && up > s.timeline[key] {
		s.timeline[key] = up
	}
	if s.reported[key] == s.timeline[key] {
		delete(s.replayed, key)
	} else if at, ok := s.replayed[key]; !ok {
		s.replayed[key] = time.Now()
	} else if m, _, _ := strings.Cut(key, "/"); reconciled && !s.holdRestartpoint[m] && time.Since(at) >= s.restartpoint {
		s.reported[key] = s.timeline[key] // the restartpoint
		delete(s.replayed, key)
	}
	next["instanceNames"] = []any{name + "-1"}
	if m, _, _ := strings.Cut(key, "/"); s.blind[m] {
		next["systemID"] = ""
		next["instancesReportedState"] = map[string]any{
			name + "-1": map[string]any{"isPrimary": false, "timeLineID": int64(0)},
		}
		return
	}
	next["systemID"] = s.systemIDs[db]
	next["instancesReportedState"] = map[string]any{
		name + "-1": map[string]any{"isPrimary": acting, "timeLineID": s.reported[key]},
	}
	if acting {
		next["timelineID"] = s.reported[key]
	}
}

// randomSystemID is a PostgreSQL system identifier (a 64-bit number).
func randomSystemID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	var n uint64
	for _, c := range b {
		n = n<<8 | uint64(c)
	}
	return strconv.FormatUint(n>>1, 10)
}

// primaryWatch records, over a test, the most members whose Cluster for one
// Database is written as primary (spec.replica.primary == spec.replica.self)
// at once, or, with sim, written or acting as a primary (a demoted Cluster
// acts as one until its demotion finished). A pass that sees two reads
// again before it counts them.
type primaryWatch struct {
	e        *env
	sim      *cnpgSim
	ns, name string
	mu       sync.Mutex
	max      int
	seen     []string
	// ever are the members ever seen written as primary.
	ever map[string]bool
}

func (w *primaryWatch) primaries(ctx context.Context) []string {
	var out []string
	if w.sim != nil {
		out = w.sim.actingPrimaries(w.ns, w.name)
	}
	for _, m := range w.e.fleet.Members {
		u := member.NewCNPGCluster()
		if err := m.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: w.name}, u); err != nil {
			continue
		}
		self, _, _ := unstructured.NestedString(u.Object, "spec", "replica", "self")
		primary, _, _ := unstructured.NestedString(u.Object, "spec", "replica", "primary")
		if self != "" && self == primary && !slices.Contains(out, m.Name) {
			out = append(out, m.Name)
		}
	}
	return out
}

func (w *primaryWatch) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
		p := w.primaries(ctx)
		if len(p) > 1 {
			p = w.primaries(ctx)
		}
		w.mu.Lock()
		if w.ever == nil {
			w.ever = map[string]bool{}
		}
		for _, m := range p {
			w.ever[m] = true
		}
		if len(p) > w.max {
			w.max, w.seen = len(p), p
		}
		w.mu.Unlock()
	}
}

// everPrimary reports whether m was ever seen written as primary.
func (w *primaryWatch) everPrimary(m string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ever[m]
}

func (w *primaryWatch) most() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max, w.seen
}

// cnpgReconciledStatus is the status CloudNativePG's operator reports for the
// Cluster u after a reconcile, on a copy of status, as far as fleetdb reads
// it. What it reports, and what it never does, is CloudNativePG v1.30.0's:
//   - no status.observedGeneration and no observedGeneration on a condition
//     (pkg/resources/status and internal/controller never set one);
//   - status.image from spec.imageName and status.pgDataImageInfo
//     (reconcileImage, internal/controller/cluster_image.go), status.instances
//     for the instances it has;
//   - the cnpg.io/hibernation condition with the reasons of EnrichStatus
//     (pkg/reconciler/hibernation/status.go): Hibernated once a healthy
//     Cluster stopped, WaitingForHealthy (False) while an unhealthy one has not
//     started;
//   - status.secretsResourceVersion (refreshSecretResourceVersions,
//     internal/controller/cluster_status.go), refreshed only when the
//     operator reconciles: when the Cluster's spec changed, or when a Secret
//     it watches changed, and it watches only Secrets the Cluster owns or
//     labelled cnpg.io/reload (isUsefulClusterSecret,
//     internal/controller/cluster_predicates.go). A change to any other
//     Secret is seen at some unrelated later reconcile: never, here.
func cnpgReconciledStatus(ctx context.Context, c client.Client, u *unstructured.Unstructured, status map[string]any, healthy bool) map[string]any {
	next := map[string]any{}
	for k, v := range status {
		next[k] = v
	}
	n, _, _ := unstructured.NestedInt64(u.Object, "spec", "instances")
	image, _, _ := unstructured.NestedString(u.Object, "spec", "imageName")
	hibernating := u.GetAnnotations()["cnpg.io/hibernation"] == "on"
	var conditions []any
	if healthy {
		next["phase"], next["instances"], next["readyInstances"] = "Cluster in healthy state", n, n
		next["currentPrimary"], next["targetPrimary"] = u.GetName()+"-1", u.GetName()+"-1"
		conditions = append(conditions, map[string]any{"type": "Ready", "status": "True", "reason": "ClusterIsReady",
			"message": "Cluster is Ready", "lastTransitionTime": "2026-11-30T00:00:00Z"})
		if image != "" {
			next["image"] = image
			if major, ok := imageMajor(image); ok {
				next["pgDataImageInfo"] = map[string]any{"image": image, "majorVersion": major}
			}
		}
		if hibernating {
			conditions = append(conditions, map[string]any{"type": "cnpg.io/hibernation", "status": "True", "reason": "Hibernated",
				"message": "Cluster has been hibernated", "lastTransitionTime": "2026-11-30T00:00:00Z"})
		}
	} else {
		next["phase"], next["instances"], next["readyInstances"] = "Setting up primary", n, int64(0)
		conditions = append(conditions, map[string]any{"type": "Ready", "status": "False", "reason": "ClusterIsNotReady",
			"message": "Cluster Is Not Ready", "lastTransitionTime": "2026-11-30T00:00:00Z"})
		if hibernating {
			conditions = append(conditions, map[string]any{"type": "cnpg.io/hibernation", "status": "False", "reason": "WaitingForHealthy",
				"message": "Waiting for the cluster to be healthy before proceeding with hibernation", "lastTransitionTime": "2026-11-30T00:00:00Z"})
		}
	}
	next["conditions"] = conditions
	if versions := cnpgSecretVersions(ctx, c, u); versions != nil {
		next["secretsResourceVersion"] = versions
	}
	return next
}

// cnpgReconciles remembers, per Cluster (by UID), the generation the
// simulated operator last reconciled.
var cnpgReconciles sync.Map

// cnpgSecretVersions is status.secretsResourceVersion after the simulated
// operator's reconcile (see cnpgReconciledStatus): the current resource
// versions of the Secrets the Cluster names when it reconciles, the ones it
// reported before otherwise; nil to leave the status as it is.
func cnpgSecretVersions(ctx context.Context, c client.Client, u *unstructured.Unstructured) map[string]any {
	names := map[string]string{} // status key -> Secret name
	for _, method := range []string{"initdb", "pg_basebackup", "recovery"} {
		if name, _, _ := unstructured.NestedString(u.Object, "spec", "bootstrap", method, "secret", "name"); name != "" {
			names["applicationSecretVersion"] = name
		}
	}
	for field, key := range map[string]string{
		"serverTLSSecret": "serverSecretVersion", "serverCASecret": "serverCaSecretVersion",
		"clientCASecret": "clientCaSecretVersion", "replicationTLSSecret": "replicationSecretVersion",
	} {
		if name, _, _ := unstructured.NestedString(u.Object, "spec", "certificates", field); name != "" {
			names[key] = name
		}
	}
	reported, _, _ := unstructured.NestedStringMap(u.Object, "status", "secretsResourceVersion")
	last, seen := cnpgReconciles.Load(u.GetUID())
	reconcile := !seen || last.(int64) != u.GetGeneration()
	current := map[string]any{}
	for key, name := range names {
		var secret corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: u.GetNamespace(), Name: name}, &secret); err != nil {
			continue
		}
		current[key] = secret.ResourceVersion
		_, watched := secret.Labels[member.CNPGReloadLabel]
		for _, o := range secret.OwnerReferences {
			watched = watched || (o.Kind == "Cluster" && o.UID == u.GetUID())
		}
		if watched && reported[key] != secret.ResourceVersion {
			reconcile = true // the event of a watched Secret
		}
	}
	if !reconcile {
		return nil
	}
	cnpgReconciles.Store(u.GetUID(), u.GetGeneration())
	return current
}

// imageMajor is the major version of an operand image's tag ("…:17.10-system-trixie" -> 17).
func imageMajor(image string) (int64, bool) {
	i := strings.LastIndex(image, ":")
	if i < 0 {
		return 0, false
	}
	v := image[i+1:]
	v, _, _ = strings.Cut(v, "-")
	v, _, _ = strings.Cut(v, ".")
	major, err := strconv.ParseInt(v, 10, 64)
	return major, err == nil
}

// writeCNPGStatus writes next as u's status when it differs from status.
func writeCNPGStatus(ctx context.Context, c client.Client, u *unstructured.Unstructured, status, next map[string]any) {
	a, _ := json.Marshal(status)
	b, _ := json.Marshal(next)
	if string(a) == string(b) {
		return
	}
	patch, _ := json.Marshal(map[string]any{"status": next})
	_ = c.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, patch))
}
