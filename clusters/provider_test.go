package clusters_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/test/fleet"
)

const (
	secretNamespace = "fleetdb-system"
	// The machine is slow and busy: generous, never a timing assertion.
	timeout = 2 * time.Minute
	poll    = 250 * time.Millisecond
)

// TestProvider runs the provider in a real multicluster manager against a real
// hub and two real members. The steps share one fleet and run in order.
func TestProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	// Shown by go test on failure or with -v.
	ctrl.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, time.Now().Format(time.TimeOnly), prefix, args) }, funcr.Options{}))
	// m3 is for "late": a second registration of m1's or m2's cluster would
	// be refused as DuplicateCluster.
	f := fleet.Start(t, fleet.Options{Members: []string{"m1", "m2", "m3"}, WithoutCNPG: []string{"m3"}})
	s := &providerSuite{h: startHarness(t, f), m1: f.Member("m1"), m2: f.Member("m2"), m3: f.Member("m3")}
	t.Run("a MemberCluster with its Secret is engaged and Ready", s.testEngaged)
	t.Run("a garbage kubeconfig is InvalidKubeconfig and leaves the others alone", s.testGarbageKubeconfig)
	t.Run("a kubeconfig pointing at a closed port is Unreachable", s.testClosedPort)
	t.Run("a kubeconfig with a bogus token is Unauthorized", s.testBogusToken)
	t.Run("a missing Secret is reported and the member engages once it appears", s.testMissingSecret)
	t.Run("rewriting the Secret reconnects only when the kubeconfig bytes change", s.testRewriteSecret)
	t.Run("deleting the MemberCluster disengages the member", s.testDeleteDisengages)
	t.Run("a fleet at rest makes zero writes", s.testAtRest)
	t.Run("a replica that starts writing status writes what changed while it did not", s.testStatusWriterResync)
	t.Run("a stopped member stays engaged and becomes Ready=False Unreachable after the grace period", s.testStoppedMember)
}

// providerSuite is what the steps of TestProvider share.
type providerSuite struct {
	h          *harness
	m1, m2, m3 *fleet.ControlPlane
	// m1Cluster is the cluster the first step engaged for m1.
	m1Cluster cluster.Cluster
}

// testEngaged: a MemberCluster with its Secret is engaged and Ready.
func (s *providerSuite) testEngaged(t *testing.T) {
	h, m1 := s.h, s.m1
	g := NewWithT(t)
	h.register(t, "m1", m1.Kubeconfig)
	mc := h.eventuallyConditions(t, "m1", cond(fleetv1alpha1.MemberConditionJoined, metav1.ConditionTrue, fleetv1alpha1.ReasonJoined),
		cond(fleetv1alpha1.MemberConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded))
	g.Expect(mc.Status.KubernetesVersion).To(Equal(serverVersion(t, m1.Config)))
	g.Expect(mc.Status.LastProbeTime).NotTo(BeNil())
	for _, c := range mc.Status.Conditions {
		g.Expect(c.ObservedGeneration).To(Equal(mc.Generation))
	}

	cl, err := h.provider.Get(h.ctx, "m1")
	g.Expect(err).NotTo(HaveOccurred())
	s.m1Cluster = cl
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	defer cancel()
	g.Expect(cl.GetClient().Get(ctx, types.NamespacedName{Name: "kube-system"}, &corev1.Namespace{})).To(Succeed(), "a cached read in the member")
	g.Expect(h.engaged.current("m1")).To(BeIdenticalTo(cl), "the manager engaged the same cluster")

	health := h.provider.Health("m1")
	g.Expect(health.Engaged).To(BeTrue())
	g.Expect(health.Ready).To(BeTrue())
	g.Eventually(h.events.seen).WithArguments("m1", 0).WithTimeout(timeout).Should(BeTrue(), "subscribers hear of the engagement")

	cfg, ok := h.provider.ConfigFor("m1")
	g.Expect(ok).To(BeTrue())
	g.Expect(serverVersion(t, cfg)).To(Equal(mc.Status.KubernetesVersion))
}

// testStatusWriterResync: a MemberCluster registered while the provider does
// not write status (a standby) gets none; once it writes (elected),
// ResyncStatus writes it without any other news of the member.
func (s *providerSuite) testStatusWriterResync(t *testing.T) {
	h := s.h
	g := NewWithT(t)
	h.standby.Store(true)
	h.register(t, "quiet", []byte("this is not a kubeconfig"))
	g.Eventually(func() string { return h.provider.Health("quiet").Reason }).WithTimeout(timeout).WithPolling(poll).
		Should(Equal(fleetv1alpha1.ReasonInvalidKubeconfig), "the standby's view")
	g.Consistently(func(g Gomega) {
		mc := &fleetv1alpha1.MemberCluster{}
		g.Expect(h.hub.Get(h.ctx, types.NamespacedName{Name: "quiet"}, mc)).To(Succeed())
		g.Expect(mc.Status.Conditions).To(BeEmpty(), "a standby writes no status")
	}).WithTimeout(2 * time.Second).WithPolling(poll).Should(Succeed())
	h.standby.Store(false)
	h.provider.ResyncStatus()
	h.eventuallyConditions(t, "quiet", cond(fleetv1alpha1.MemberConditionReady, metav1.ConditionFalse, fleetv1alpha1.ReasonInvalidKubeconfig))
}

// testGarbageKubeconfig: a garbage kubeconfig is InvalidKubeconfig and leaves the others alone.
func (s *providerSuite) testGarbageKubeconfig(t *testing.T) {
	h, m2 := s.h, s.m2
	g := NewWithT(t)
	h.register(t, "bad", []byte("this is not a kubeconfig"))
	h.register(t, "m2", m2.Kubeconfig)
	h.eventuallyConditions(t, "bad", cond(fleetv1alpha1.MemberConditionJoined, metav1.ConditionFalse, fleetv1alpha1.ReasonInvalidKubeconfig),
		cond(fleetv1alpha1.MemberConditionReady, metav1.ConditionFalse, fleetv1alpha1.ReasonInvalidKubeconfig))
	h.eventuallyConditions(t, "m2", cond(fleetv1alpha1.MemberConditionJoined, metav1.ConditionTrue, fleetv1alpha1.ReasonJoined))
	_, err := h.provider.Get(h.ctx, "bad")
	g.Expect(errors.Is(err, multicluster.ErrClusterNotFound)).To(BeTrue())
	g.Expect(h.provider.Get(h.ctx, "m1")).To(BeIdenticalTo(s.m1Cluster))
	g.Expect(h.provider.Health("m1").Ready).To(BeTrue())
}

// testClosedPort: a kubeconfig pointing at a closed port is Unreachable.
func (s *providerSuite) testClosedPort(t *testing.T) {
	h, m1 := s.h, s.m1
	h.register(t, "closed", withServer(t, m1.Kubeconfig, "https://"+closedAddress(t)))
	h.eventuallyConditions(t, "closed", cond(fleetv1alpha1.MemberConditionJoined, metav1.ConditionFalse, fleetv1alpha1.ReasonUnreachable),
		cond(fleetv1alpha1.MemberConditionReady, metav1.ConditionFalse, fleetv1alpha1.ReasonUnreachable))
	NewWithT(t).Expect(h.provider.Health("closed").Engaged).To(BeFalse())
}

// testBogusToken: a kubeconfig with a bogus token is Unauthorized.
func (s *providerSuite) testBogusToken(t *testing.T) {
	h, m2 := s.h, s.m2
	h.register(t, "bogus", withToken(t, m2.Kubeconfig, "bogus-token"))
	h.eventuallyConditions(t, "bogus", cond(fleetv1alpha1.MemberConditionJoined, metav1.ConditionFalse, fleetv1alpha1.ReasonUnauthorized),
		cond(fleetv1alpha1.MemberConditionReady, metav1.ConditionFalse, fleetv1alpha1.ReasonUnauthorized))
}

// testMissingSecret: a missing Secret is reported and the member engages once it appears.
func (s *providerSuite) testMissingSecret(t *testing.T) {
	h, m3 := s.h, s.m3
	g := NewWithT(t)
	h.createMemberCluster(t, "late")
	h.eventuallyConditions(t, "late", cond(fleetv1alpha1.MemberConditionJoined, metav1.ConditionFalse, fleetv1alpha1.ReasonSecretNotFound))
	h.createSecret(t, "late", m3.Kubeconfig)
	h.eventuallyConditions(t, "late", cond(fleetv1alpha1.MemberConditionJoined, metav1.ConditionTrue, fleetv1alpha1.ReasonJoined),
		cond(fleetv1alpha1.MemberConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded))
	g.Expect(h.provider.Get(h.ctx, "late")).NotTo(BeNil())
}

// testRewriteSecret: rewriting the Secret reconnects only when the kubeconfig bytes change.
func (s *providerSuite) testRewriteSecret(t *testing.T) {
	h, m1 := s.h, s.m1
	g := NewWithT(t)
	engagements := h.engaged.count("m1")

	// Same bytes, new resourceVersion: the Secret event arrives, nothing reconnects.
	h.updateSecret(t, "m1", func(s *corev1.Secret) { s.Annotations = map[string]string{"rotated": "no"} })
	g.Consistently(func() cluster.Cluster {
		cl, _ := h.provider.Get(h.ctx, "m1")
		return cl
	}).WithTimeout(3 * time.Second).WithPolling(poll).Should(BeIdenticalTo(s.m1Cluster))
	g.Expect(h.engaged.count("m1")).To(Equal(engagements))

	// Different bytes, same cluster: a new cluster, the old one disengaged.
	h.updateSecret(t, "m1", func(s *corev1.Secret) {
		s.Data["kubeconfig"] = append(slices.Clone(m1.Kubeconfig), []byte("\n# rotated\n")...)
	})
	g.Eventually(func() cluster.Cluster {
		cl, _ := h.provider.Get(h.ctx, "m1")
		return cl
	}).WithTimeout(timeout).WithPolling(poll).ShouldNot(Or(BeNil(), BeIdenticalTo(s.m1Cluster)))
	g.Eventually(h.engaged.contextOf(s.m1Cluster).Done()).WithTimeout(timeout).Should(BeClosed(), "the old cluster is disengaged")
	newCluster, err := h.provider.Get(h.ctx, "m1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(h.engaged.current).WithArguments("m1").WithTimeout(timeout).Should(BeIdenticalTo(newCluster))
	h.eventuallyConditions(t, "m1", cond(fleetv1alpha1.MemberConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded))
}

// testDeleteDisengages: deleting the MemberCluster disengages the member.
func (s *providerSuite) testDeleteDisengages(t *testing.T) {
	h := s.h
	g := NewWithT(t)
	late, err := h.provider.Get(h.ctx, "late")
	g.Expect(err).NotTo(HaveOccurred())
	mark := h.events.len()
	g.Expect(h.hub.Delete(h.ctx, &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "late"}})).To(Succeed())
	g.Eventually(func() error {
		_, err := h.provider.Get(h.ctx, "late")
		return err
	}).WithTimeout(timeout).WithPolling(poll).Should(MatchError(multicluster.ErrClusterNotFound))
	g.Eventually(h.engaged.contextOf(late).Done()).WithTimeout(timeout).Should(BeClosed())
	g.Expect(h.provider.Health("late")).To(Equal(clusters.Health{}))
	g.Eventually(h.events.seen).WithArguments("late", mark).WithTimeout(timeout).Should(BeTrue())
}

// testAtRest: a fleet at rest makes zero writes.
func (s *providerSuite) testAtRest(t *testing.T) {
	h := s.h
	g := NewWithT(t)
	// Wait until every member shows its final state (failed connects keep
	// retrying with backoff, which must not write either).
	for name, want := range map[string]string{
		"m1": fleetv1alpha1.ReasonProbeSucceeded, "m2": fleetv1alpha1.ReasonProbeSucceeded,
		"bad": fleetv1alpha1.ReasonInvalidKubeconfig, "closed": fleetv1alpha1.ReasonUnreachable, "bogus": fleetv1alpha1.ReasonUnauthorized,
	} {
		h.eventuallyConditions(t, name, cond(fleetv1alpha1.MemberConditionReady, "", want))
	}
	before := h.resourceVersions(t)
	hubWrites, memberWrites := h.writes.Total("hub"), h.writes.Total("member")
	// A quiet interval of many probe intervals and connect retries.
	g.Consistently(func() int {
		return h.writes.Total("hub") - hubWrites
	}).WithTimeout(6 * time.Second).WithPolling(poll).Should(BeZero())
	g.Expect(h.writes.Total("member") - memberWrites).To(BeZero())
	g.Expect(h.resourceVersions(t)).To(Equal(before))
	g.Expect(h.provider.Health("m1").LastProbe).To(BeTemporally(">", time.Now().Add(-3*time.Second)), "probes did run meanwhile")
}

// testStoppedMember: a stopped member stays engaged and becomes Ready=False Unreachable after the grace period.
func (s *providerSuite) testStoppedMember(t *testing.T) {
	h, m2 := s.h, s.m2
	g := NewWithT(t)
	before, err := h.provider.Get(h.ctx, "m2")
	g.Expect(err).NotTo(HaveOccurred())
	mark := h.events.len()
	g.Expect(m2.Stop()).To(Succeed())

	mc := h.eventuallyConditions(t, "m2", cond(fleetv1alpha1.MemberConditionReady, metav1.ConditionFalse, fleetv1alpha1.ReasonUnreachable),
		cond(fleetv1alpha1.MemberConditionJoined, metav1.ConditionTrue, fleetv1alpha1.ReasonJoined))
	g.Expect(mc.Status.KubernetesVersion).NotTo(BeEmpty(), "the last version reported stays")
	g.Eventually(h.events.seen).WithArguments("m2", mark).WithTimeout(timeout).Should(BeTrue(), "subscribers hear of the Ready change")
	health := h.provider.Health("m2")
	g.Expect(health.Engaged).To(BeTrue())
	g.Expect(health.Ready).To(BeFalse())
	g.Expect(health.Reason).To(Equal(fleetv1alpha1.ReasonUnreachable))
	g.Expect(h.provider.Get(h.ctx, "m2")).To(BeIdenticalTo(before), "not torn down")
	g.Expect(h.provider.Health("m1").Ready).To(BeTrue(), "the other member is unaffected")
}

// harness is a running manager with the provider on a fleet's hub.
type harness struct {
	ctx      context.Context
	hub      client.Client
	provider *clusters.Provider
	engaged  *engagements
	events   *collector
	// writes counts the registry's writes to the hub ("hub") and the members ("member").
	writes fleet.WriteCounter
	// standby keeps the provider from writing MemberCluster status (SetStatusWriter).
	standby atomic.Bool
}

func startHarness(t *testing.T, f *fleet.Fleet) *harness {
	t.Helper()
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{ctx: ctx, hub: f.Hub.Client, engaged: &engagements{}, events: &collector{}}

	h.provider = clusters.New(clusters.Options{
		ProbeInterval:      300 * time.Millisecond,
		ProbeTimeout:       5 * time.Second,
		FailureGracePeriod: 2 * time.Second,
		ConnectTimeout:     30 * time.Second,
		WrapTransport: func(_ string, rt http.RoundTripper) http.RoundTripper {
			return h.writes.Wrap("member", rt)
		},
	})
	hubCfg := rest.CopyConfig(f.Hub.Config)
	hubCfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return h.writes.Wrap("hub", rt) }
	mgr, err := mcmanager.New(hubCfg, h.provider, manager.Options{
		Scheme:                 fleet.Scheme,
		Metrics:                server.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mgr.Add(h.engaged)).To(Succeed())
	g.Expect(h.provider.SetupWithManager(ctx, mgr)).To(Succeed())
	h.provider.SetStatusWriter(func() bool { return !h.standby.Load() })
	go h.events.collect(h.provider.Subscribe())

	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	// Runs before the fleet's cleanup: the manager stops before the control planes.
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("manager: %v", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("manager did not stop")
		}
	})

	g.Expect(h.hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: secretNamespace}})).To(Succeed())
	return h
}

func (h *harness) register(t *testing.T, name string, kubeconfig []byte) {
	t.Helper()
	h.createSecret(t, name, kubeconfig)
	h.createMemberCluster(t, name)
}

func (h *harness) createSecret(t *testing.T, name string, kubeconfig []byte) {
	t.Helper()
	NewWithT(t).Expect(h.hub.Create(h.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: secretNamespace, Name: name + "-kubeconfig"},
		Data:       map[string][]byte{"kubeconfig": kubeconfig},
	})).To(Succeed())
}

func (h *harness) updateSecret(t *testing.T, name string, mutate func(*corev1.Secret)) {
	t.Helper()
	g := NewWithT(t)
	s := &corev1.Secret{}
	g.Expect(h.hub.Get(h.ctx, types.NamespacedName{Namespace: secretNamespace, Name: name + "-kubeconfig"}, s)).To(Succeed())
	mutate(s)
	g.Expect(h.hub.Update(h.ctx, s)).To(Succeed())
}

func (h *harness) createMemberCluster(t *testing.T, name string) {
	t.Helper()
	NewWithT(t).Expect(h.hub.Create(h.ctx, &fleetv1alpha1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": "clusters"}},
		Spec: fleetv1alpha1.MemberClusterSpec{
			KubeconfigSecretRef: fleetv1alpha1.SecretKeyRef{Name: name + "-kubeconfig"},
		},
	})).To(Succeed())
}

// wantCondition is a condition type with the status ("" for any) and reason it should have.
type wantCondition struct {
	typ    string
	status metav1.ConditionStatus
	reason string
}

func cond(typ string, status metav1.ConditionStatus, reason string) wantCondition {
	return wantCondition{typ: typ, status: status, reason: reason}
}

// eventuallyConditions waits until the MemberCluster has all the conditions and returns it.
func (h *harness) eventuallyConditions(t *testing.T, name string, want ...wantCondition) *fleetv1alpha1.MemberCluster {
	t.Helper()
	mc := &fleetv1alpha1.MemberCluster{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(h.hub.Get(h.ctx, types.NamespacedName{Name: name}, mc)).To(Succeed())
		for _, w := range want {
			c := meta.FindStatusCondition(mc.Status.Conditions, w.typ)
			g.Expect(c).NotTo(BeNil(), "condition %s", w.typ)
			if w.status != "" {
				g.Expect(c.Status).To(Equal(w.status), "condition %s: %s", w.typ, c.Message)
			}
			g.Expect(c.Reason).To(Equal(w.reason), "condition %s: %s", w.typ, c.Message)
			g.Expect(c.ObservedGeneration).To(Equal(mc.Generation))
		}
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return mc
}

// resourceVersions maps every MemberCluster to its resourceVersion.
func (h *harness) resourceVersions(t *testing.T) map[string]string {
	t.Helper()
	var list fleetv1alpha1.MemberClusterList
	NewWithT(t).Expect(h.hub.List(h.ctx, &list)).To(Succeed())
	rvs := map[string]string{}
	for _, mc := range list.Items {
		rvs[mc.Name] = mc.ResourceVersion
	}
	return rvs
}

// engagements is an Aware runnable on the manager that records what it engages.
type engagements struct {
	mu   sync.Mutex
	byCl map[cluster.Cluster]context.Context
	last map[string]cluster.Cluster
	n    map[string]int
}

func (e *engagements) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (e *engagements) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.byCl == nil {
		e.byCl, e.last, e.n = map[cluster.Cluster]context.Context{}, map[string]cluster.Cluster{}, map[string]int{}
	}
	e.byCl[cl], e.last[string(name)] = ctx, cl
	e.n[string(name)]++
	return nil
}

func (e *engagements) current(name string) cluster.Cluster {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last[name]
}

func (e *engagements) count(name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[name]
}

func (e *engagements) contextOf(cl cluster.Cluster) context.Context {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ctx, ok := e.byCl[cl]; ok {
		return ctx
	}
	return context.Background()
}

// collector records every name a subscription delivers.
type collector struct {
	mu    sync.Mutex
	names []string
}

func (c *collector) collect(ch <-chan string) {
	for name := range ch {
		c.mu.Lock()
		c.names = append(c.names, name)
		c.mu.Unlock()
	}
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.names)
}

// seen reports whether name was delivered at or after position from.
func (c *collector) seen(name string, from int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.names[from:], name)
}

// serverVersion is the git version the API server of cfg reports.
func serverVersion(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	v, err := dc.ServerVersion()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return v.GitVersion
}

// closedAddress is a local address where nothing listens.
func closedAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	NewWithT(t).Expect(l.Close()).To(Succeed())
	return addr
}

// withServer rewrites every cluster of the kubeconfig to server.
func withServer(t *testing.T, kubeconfig []byte, server string) []byte {
	return rewrite(t, kubeconfig, func(c *clientcmdapi.Config) {
		for _, cl := range c.Clusters {
			cl.Server = server
		}
	})
}

// withToken replaces every user's credentials of the kubeconfig with token.
func withToken(t *testing.T, kubeconfig []byte, token string) []byte {
	return rewrite(t, kubeconfig, func(c *clientcmdapi.Config) {
		for name := range c.AuthInfos {
			c.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
		}
	})
}

func rewrite(t *testing.T, kubeconfig []byte, mutate func(*clientcmdapi.Config)) []byte {
	t.Helper()
	g := NewWithT(t)
	c, err := clientcmd.Load(kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	mutate(c)
	out, err := clientcmd.Write(*c)
	g.Expect(err).NotTo(HaveOccurred())
	return out
}
