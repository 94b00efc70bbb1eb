package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

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
// or, without a token, at once (a forced promotion). Knobs: frozen members
// are not touched at all; unhealthy members never turn healthy.
type cnpgSim struct {
	e     *env
	delay time.Duration

	mu        sync.Mutex
	acting    map[string]bool      // member/ns/name -> acts as primary
	demoteAt  map[string]time.Time // when a pending demotion happens
	tokens    map[string]bool      // demotion tokens issued
	frozen    map[string]bool
	unhealthy map[string]bool
}

func newCNPGSim(e *env, delay time.Duration) *cnpgSim {
	return &cnpgSim{e: e, delay: delay, acting: map[string]bool{}, demoteAt: map[string]time.Time{},
		tokens: map[string]bool{}, frozen: map[string]bool{}, unhealthy: map[string]bool{}}
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
	next := s.transition(m+"/"+u.GetNamespace()+"/"+u.GetName(), self, primary, token, status)
	n, _, _ := unstructured.NestedInt64(u.Object, "spec", "instances")
	s.mu.Lock()
	healthy := !s.unhealthy[m]
	s.mu.Unlock()
	if healthy {
		next["phase"], next["instances"], next["readyInstances"] = "Cluster in healthy state", n, n
		next["currentPrimary"], next["targetPrimary"] = u.GetName()+"-1", u.GetName()+"-1"
		next["conditions"] = []any{map[string]any{"type": "Ready", "status": "True", "reason": "ClusterIsReady",
			"message": "Cluster is Ready", "lastTransitionTime": "2026-11-30T00:00:00Z"}}
	} else {
		next["phase"], next["instances"], next["readyInstances"] = "Setting up primary", n, int64(0)
	}
	a, _ := json.Marshal(status)
	b, _ := json.Marshal(next)
	if string(a) == string(b) {
		return
	}
	patch, _ := json.Marshal(map[string]any{"status": next})
	_ = c.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, patch))
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
	switch {
	case acting && primary != self:
		at, ok := s.demoteAt[key]
		if !ok {
			s.demoteAt[key] = time.Now().Add(s.delay)
			next["switchReplicaClusterStatus"] = map[string]any{"inProgress": true}
			return next
		}
		if time.Now().Before(at) {
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
	case !acting && primary == self && s.tokens[token]:
		next["lastPromotionToken"] = token
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
		if len(p) > w.max {
			w.max, w.seen = len(p), p
		}
		w.mu.Unlock()
	}
}

func (w *primaryWatch) most() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max, w.seen
}
