// Package integration runs fleetdb's hub controllers in the test process
// against real kube-apiservers: one hub and three members started by the
// fleet harness. envtest runs no controllers, so member StatefulSets are made
// "ready" by a simulator that writes their status the way the StatefulSet
// controller would, and only for the members the test lets it.
package integration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/clusters"
	"github.com/fleetdb/fleetdb/hub"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/fleet"
)

const (
	eventually = 60 * time.Second
	poll       = 200 * time.Millisecond
	hubNS      = "fleetdb-system"
	// memberCallTimeout is the hubs' member call timeout in these tests.
	memberCallTimeout = 5 * time.Second
)

// env is a running fleet with the hub's controllers.
type env struct {
	t       *testing.T
	fleet   *fleet.Fleet
	hub     client.Client
	proxies map[string]*fleet.Proxy
	writes  *fleet.WriteCounter
	reads   *readLog
	sim     *simulator
	ctx     context.Context
	// stopHub stops the hub's manager (once).
	stopHub func()
}

// envOptions tune startEnvWith.
type envOptions struct {
	// metricsAddr is the hub's metrics endpoint; "" disables it.
	metricsAddr string
	// logs, when set, receives the hub's logs as JSON lines (controller-runtime's
	// global logger is set once per process, so the hub gets its own).
	logs io.Writer
	// withoutCNPG are members without CloudNativePG's CRDs.
	withoutCNPG []string
	// hubWrap, when set, wraps the transport of the hub manager's hub client.
	hubWrap func(http.RoundTripper) http.RoundTripper
	// unregistered are members started but not registered on the hub (a
	// test registers them under a name of its own: one cluster registered
	// under two names is refused, DuplicateCluster).
	unregistered []string
}

func startEnvWith(t *testing.T, opts envOptions, members ...string) *env {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(logWriter{})))
	f := fleet.Start(t, fleet.Options{Members: members, WithoutCNPG: opts.withoutCNPG})
	e := &env{t: t, fleet: f, hub: f.Hub.Client, proxies: map[string]*fleet.Proxy{}, writes: &fleet.WriteCounter{}, reads: &readLog{}, ctx: fleet.Context(t)}
	g := NewWithT(t)
	g.Expect(e.hub.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hubNS}})).To(Succeed())
	for _, m := range f.Members {
		u, err := url.Parse(m.Config.Host)
		g.Expect(err).NotTo(HaveOccurred())
		p := fleet.NewProxy(t, u.Host)
		e.proxies[m.Name] = p
		kc, err := fleet.KubeconfigVia(m.Kubeconfig, p.Addr())
		g.Expect(err).NotTo(HaveOccurred())
		if !slices.Contains(opts.unregistered, m.Name) {
			e.register(m.Name, kc, map[string]string{"name": m.Name})
		}
	}

	e.startHub(opts)
	e.sim = newSimulator(e)
	go e.sim.run(e.ctx)
	for _, m := range f.Members {
		if !slices.Contains(opts.unregistered, m.Name) {
			e.waitMemberReady(m.Name)
		}
	}
	return e
}

// startHub starts the hub's manager; e.stopHub stops it (a test may start
// another one, as a restarted hub).
func (e *env) startHub(opts envOptions) {
	t, g := e.t, NewWithT(e.t)
	// The hub runs as deploy/rbac's ServiceAccount; a 403 fails the test.
	hubCfg := hubIdentity(t, e.ctx, e.fleet.Hub.Config, e.hub)
	hubCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return e.writes.Wrap("hub", rt) })
	if opts.hubWrap != nil {
		hubCfg.Wrap(opts.hubWrap)
	}
	mgr, _, err := hub.NewManager(e.ctx, hub.Config{
		Hub: hubCfg,
		Options: hub.Options{
			HubNamespace:      hubNS,
			MemberCallTimeout: memberCallTimeout,
		},
		Registry: clusters.Options{
			ProbeInterval:      500 * time.Millisecond,
			ProbeTimeout:       time.Second,
			FailureGracePeriod: 1500 * time.Millisecond,
			ConnectTimeout:     10 * time.Second,
			WrapTransport: func(target string, rt http.RoundTripper) http.RoundTripper {
				return e.writes.Wrap(target, e.reads.wrap(target, rt))
			},
		},
		MetricsAddr: opts.metricsAddr,
		Logger:      hubLogger(opts.logs),
		// TestHub, TestMetrics and TestTracing each run a hub in this process.
		SkipControllerNameValidation: true,
	})
	g.Expect(err).NotTo(HaveOccurred())
	// Stop the manager before the control planes go (cleanups run last-in
	// first-out). The manager gets this context itself: reading e.ctx in the
	// goroutine raced with the assignment, and a manager started on the outer
	// context made the cleanup wait for a cancel that comes only after it.
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("hub manager: %v%s", err, stuckGoroutines(err))
		}
	}()
	var once sync.Once
	e.stopHub = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(e.stopHub)
}

// register writes a member's kubeconfig Secret and MemberCluster on the hub.
func (e *env) register(name string, kubeconfig []byte, labels map[string]string) {
	registerOn(e.t, e.ctx, e.hub, name, kubeconfig, labels)
}

// registerOn writes a member's kubeconfig Secret and MemberCluster on a hub.
func registerOn(t *testing.T, ctx context.Context, hubClient client.Client, name string, kubeconfig []byte, labels map[string]string) {
	g := NewWithT(t)
	e := struct {
		ctx context.Context
		hub client.Client
	}{ctx, hubClient}
	g.Expect(e.hub.Create(e.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: name + "-kubeconfig"},
		Data:       map[string][]byte{"kubeconfig": kubeconfig},
	})).To(Succeed())
	g.Expect(e.hub.Create(e.ctx, &fleetv1alpha1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: fleetv1alpha1.MemberClusterSpec{KubeconfigSecretRef: fleetv1alpha1.SecretKeyRef{
			Name: name + "-kubeconfig", Key: "kubeconfig",
		}, NamespaceSelector: &metav1.LabelSelector{}}, // every test namespace may use it
	})).To(Succeed())
}

func (e *env) waitMemberReady(name string) {
	NewWithT(e.t).Eventually(func(g Gomega) {
		var mc fleetv1alpha1.MemberCluster
		g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: name}, &mc)).To(Succeed())
		g.Expect(condition(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady)).To(HaveField("Status", metav1.ConditionTrue))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func (e *env) member(name string) client.Client { return e.fleet.Member(name).Client }

// namespace creates a fresh hub namespace for one test.
func (e *env) namespace(name string) string {
	NewWithT(e.t).Expect(e.hub.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

func (e *env) getDB(ns, name string) *fleetv1alpha1.Database {
	var db fleetv1alpha1.Database
	NewWithT(e.t).Expect(e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &db)).To(Succeed())
	return &db
}

// newDB is a postgres Database on the StatefulSet backend (one instance)
// placed on the named members. It takes no final backup (envtest runs no
// Jobs): the tests about backups (backup_test.go) set spec.backup themselves.
func newDB(ns, name string, members ...string) *fleetv1alpha1.Database {
	return &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine:    fleetv1alpha1.EnginePostgres,
			Backend:   fleetv1alpha1.BackendStatefulSet,
			Replicas:  1,
			Storage:   fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			Placement: fleetv1alpha1.PlacementSpec{ClusterNames: members},
			Backup:    &fleetv1alpha1.BackupSpec{FinalBackup: fleetv1alpha1.FinalBackupSkip},
		},
	}
}

func condition(conds []metav1.Condition, t string) metav1.Condition {
	for _, c := range conds {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}

func clusterEntry(db *fleetv1alpha1.Database, name string) fleetv1alpha1.ClusterStatus {
	for _, c := range db.Status.Clusters {
		if c.Name == name {
			return c
		}
	}
	return fleetv1alpha1.ClusterStatus{}
}

// simulator plays the member StatefulSet controller: for the members it is
// enabled on, it reports every StatefulSet of fleetdb as rolled out and ready.
type simulator struct {
	e       *env
	enabled sync.Map // member name -> bool
	passes  atomic.Int64
}

func newSimulator(e *env) *simulator { return &simulator{e: e} }

func (s *simulator) enable(member string, on bool) { s.enabled.Store(member, on) }

func (s *simulator) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		for _, m := range s.e.fleet.Members {
			releasePVCs(ctx, m.Client)
			if on, _ := s.enabled.Load(m.Name); on != true {
				continue
			}
			var list appsv1.StatefulSetList
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := m.Client.List(cctx, &list, client.MatchingLabels{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}); err == nil {
				for i := range list.Items {
					markReady(cctx, m.Client, &list.Items[i])
				}
			}
			markClustersReady(ctx, m.Client)
			cancel()
		}
		s.passes.Add(1)
	}
}

// releasePVCs plays the PVC protection controller: a deleted claim that no
// pod uses (envtest runs no pods) loses its protection finalizer.
func releasePVCs(ctx context.Context, c client.Client) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var list corev1.PersistentVolumeClaimList
	if err := c.List(cctx, &list); err != nil {
		return
	}
	for i := range list.Items {
		pvc := &list.Items[i]
		if pvc.DeletionTimestamp.IsZero() || len(pvc.Finalizers) == 0 {
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		pvc.Finalizers = nil
		_ = c.Patch(cctx, pvc, patch)
	}
}

// markReady writes the status a StatefulSet controller writes once every pod
// of the current revision is ready; it writes nothing when that is already so.
func markReady(ctx context.Context, c client.Client, sts *appsv1.StatefulSet) {
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	rev := sts.Name + "-" + strings.TrimPrefix(sts.ResourceVersion, "0")
	if s := sts.Status; s.ObservedGeneration == sts.Generation && s.ReadyReplicas == replicas && s.Replicas == replicas &&
		s.UpdatedReplicas == replicas && s.CurrentRevision == s.UpdateRevision && s.UpdateRevision != "" {
		return
	}
	sts.Status = appsv1.StatefulSetStatus{
		ObservedGeneration: sts.Generation, Replicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas,
		CurrentReplicas: replicas, UpdatedReplicas: replicas, CurrentRevision: rev, UpdateRevision: rev,
	}
	_ = c.Status().Update(ctx, sts)
}

// hubLogger is a JSON logger to w (and to logWriter), or the zero logger
// (controller-runtime's global one) when w is nil.
func hubLogger(w io.Writer) logr.Logger {
	if w == nil {
		return logr.Logger{}
	}
	return zap.New(zap.UseDevMode(false), zap.WriteTo(io.MultiWriter(w, logWriter{})))
}

// logWriter shows the hub's logs when FLEETDB_TEST_LOGS is set.
type logWriter struct{}

func (logWriter) Write(p []byte) (int, error) {
	if os.Getenv("FLEETDB_TEST_LOGS") != "" {
		return os.Stderr.Write(p)
	}
	return len(p), nil
}

// newCNPGDB is a postgres Database on the CloudNativePG backend (the
// default) with 2 instances placed on the named members.
func newCNPGDB(ns, name string, members ...string) *fleetv1alpha1.Database {
	db := newDB(ns, name, members...)
	db.Spec.Backend, db.Spec.Replicas = "", 2
	return db
}

// cpuRequest is a resources spec asking for cpu.
func cpuRequest(cpu string) *fleetv1alpha1.ResourceSpec {
	q := resource.MustParse(cpu)
	return &fleetv1alpha1.ResourceSpec{Requests: &fleetv1alpha1.ComputeResources{CPU: &q}}
}

// clusterInstances reads spec.instances of the CloudNativePG Cluster in a member (-1 when it is missing).
func clusterInstances(e *env, m, ns, name string) int64 {
	u := member.NewCNPGCluster()
	if err := e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		return -1
	}
	n, _, _ := unstructured.NestedInt64(u.Object, "spec", "instances")
	return n
}

// markClustersReady plays the CloudNativePG operator's status reports for
// the Clusters fleetdb wrote (like the local fleet's kwok Stages): healthy
// with every instance ready, and hibernated once asked to, as
// cnpgReconciledStatus reports it. It writes nothing when that is already
// so; a member without the CRD has nothing to mark.
func markClustersReady(ctx context.Context, c client.Client) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(member.CNPGClusterGVK.GroupVersion().WithKind("ClusterList"))
	if err := c.List(ctx, list, client.MatchingLabels{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}); err != nil {
		return
	}
	for i := range list.Items {
		u := &list.Items[i]
		status, _, _ := unstructured.NestedMap(u.Object, "status")
		writeCNPGStatus(ctx, c, u, status, cnpgReconciledStatus(ctx, c, u, status, true))
	}
}

// stuckGoroutines is, for a manager that did not stop within its grace
// period, where the goroutines running fleetdb's code stand (the runnable
// that held the shutdown is among them: CI shows only the test's output),
// and the path of a file with every goroutine's stack; "" for any other
// error.
func stuckGoroutines(err error) string {
	if !strings.Contains(err.Error(), "grace period") {
		return ""
	}
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
	var ours []string
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if (strings.Contains(g, "fleetdb/fleetdb/hub") || strings.Contains(g, "fleetdb/fleetdb/member") ||
			strings.Contains(g, "fleetdb/fleetdb/clusters")) && len(ours) < 20 {
			ours = append(ours, g)
		}
	}
	out := "\nfleetdb's goroutines:\n" + strings.Join(ours, "\n\n")
	if f, ferr := os.CreateTemp("", "fleetdb-stuck-goroutines-*.txt"); ferr == nil {
		_, _ = f.Write(buf.Bytes())
		_ = f.Close()
		out += "\n(every goroutine's stack: " + f.Name() + ")"
	}
	return out
}
