package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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
type cnpgSim struct {
	e     *env
	delay time.Duration

	mu        sync.Mutex
	acting    map[string]bool      // member/ns/name -> acts as primary
	demoteAt  map[string]time.Time // when a pending demotion happens
	tokens    map[string]bool      // demotion tokens issued
	frozen    map[string]bool
	unhealthy map[string]bool
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
		tokens: map[string]bool{}, frozen: map[string]bool{}, unhealthy: map[string]bool{},
		holdDemotion: map[string]bool{}, used: map[string]bool{}, unrecoverable: map[string]bool{}}
}

// holdDemotions keeps m's demotions in progress (on) or lets them finish.
func (s *cnpgSim) holdDemotions(m string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdDemotion[m] = on
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

func (s *cnpgSim) freeze(m string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen[m] = on
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
	next := s.transition(key, self, primary, token, status)
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
func (s *cnpgSim) transition(key, self, primary, token string, status map[string]any) map[string]any {
	next := map[string]any{}
	for k, v := range status {
		next[k] = v
	}
	if self == "" {
		return next
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	acting, seen := s.acting[key]
	if !seen {
		acting = primary == self
		s.acting[key] = acting
	}
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
	m, _, _ := strings.Cut(key, "/")
	switch {
	case acting && primary != self:
		at, ok := s.demoteAt[key]
		if !ok {
			s.demoteAt[key] = time.Now().Add(s.delay)
			next["switchReplicaClusterStatus"] = map[string]any{"inProgress": true}
			return next
		}
		if time.Now().Before(at) || s.holdDemotion[m] {
			return next
		}
		delete(s.demoteAt, key)
		t := randomToken()
		s.tokens[t] = true
		next["demotionToken"] = t
		next["switchReplicaClusterStatus"] = map[string]any{"inProgress": false}
		s.acting[key] = false
	case !acting && primary == self && token == "":
		s.acting[key] = true
	case !acting && primary == self && s.tokens[token] && !s.used[token]:
		next["lastPromotionToken"] = token
		s.used[token] = true
		s.acting[key] = true
	}
	return next
}

func randomToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// primaryWatch records, over a test, the most members whose Cluster for one
// Database is written as primary (spec.replica.primary == spec.replica.self)
// at once. A pass that sees two reads again before it counts them.
type primaryWatch struct {
	e        *env
	ns, name string
	mu       sync.Mutex
	max      int
	seen     []string
	// ever are the members ever seen written as primary.
	ever map[string]bool
}

func (w *primaryWatch) primaries(ctx context.Context) []string {
	var out []string
	for _, m := range w.e.fleet.Members {
		u := member.NewCNPGCluster()
		if err := m.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: w.name}, u); err != nil {
			continue
		}
		self, _, _ := unstructured.NestedString(u.Object, "spec", "replica", "self")
		primary, _, _ := unstructured.NestedString(u.Object, "spec", "replica", "primary")
		if self != "" && self == primary {
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
