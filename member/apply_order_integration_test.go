package member_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// writeLog records, in order, when each write request was sent and when its
// answer came back ("send PATCH <path>", "done PATCH <path>"). Writes whose
// path has slowSuffix are answered slowSuffixDelay late, so that a write sent
// at the same time as them is sure to be sent before they are done.
type writeLog struct {
	mu     sync.Mutex
	events []string
	slow   string
}

const slowDelay = 300 * time.Millisecond

func (l *writeLog) add(ev string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev)
}

func (l *writeLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.events
	l.events = nil
	return out
}

func (l *writeLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet {
			return rt.RoundTrip(req)
		}
		w := req.Method + " " + req.URL.Path
		l.add("send " + w)
		resp, err := rt.RoundTrip(req)
		if l.slow != "" && strings.HasSuffix(req.URL.Path, l.slow) {
			time.Sleep(slowDelay)
		}
		l.add("done " + w)
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestApplyWritesANewWorkloadFirst: when a Database's objects are created in
// a member, the workload object (StatefulSet, CloudNativePG Cluster) is
// written alone, and the other objects only once it is done: writes sent
// together contend in the member's API server, and the workload is what
// starts the database. An existing foreign workload is still refused with
// nothing written, and a change to an existing workload goes with the rest.
func TestApplyWritesANewWorkloadFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a kube-apiserver")
	}
	f := fleet.Start(t, fleet.Options{Members: []string{"m1"}})
	ctx := fleet.Context(t)
	m := f.Member("m1")
	log := &writeLog{}
	cfg := rest.CopyConfig(m.Config)
	cfg.WrapTransport = log.wrap
	c, err := client.New(cfg, client.Options{Scheme: fleet.Scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}

	// workloadFirst checks that every write but the workload's was sent
	// after the workload's write was done.
	workloadFirst := func(g Gomega, events []string, workload string) {
		done := -1
		for i, ev := range events {
			if ev == "done PATCH "+workload {
				done = i
			}
		}
		g.Expect(done).To(BeNumerically(">=", 0), "the workload %s was written: %v", workload, events)
		for i, ev := range events {
			if strings.HasPrefix(ev, "send PATCH ") && ev != "send PATCH "+workload {
				g.Expect(i).To(BeNumerically(">", done), "%s was sent before the workload was written: %v", ev, events)
			}
		}
	}

	t.Run("StatefulSet backend", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "order-sts"}})).To(Succeed())
		log.slow = "/statefulsets/orders"
		log.take()
		res, err := member.Apply(ctx, "m1", c, c, renderFor(t, newDatabase("order-sts", "orders", 3), ""), member.NewMemo())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Applied).To(HaveLen(6)) // Secret, ConfigMap, 2 Services, StatefulSet, PDB
		events := log.take()
		workloadFirst(g, events, "/apis/apps/v1/namespaces/order-sts/statefulsets/orders")
		g.Expect(events).To(HaveLen(12))
	})

	t.Run("CloudNativePG backend", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "order-cnpg"}})).To(Succeed())
		db := cnpgDatabase("order-cnpg", 2)
		objs, err := member.Render(member.Params{Database: db, Cluster: "m1", Credentials: testCredentials()})
		g.Expect(err).NotTo(HaveOccurred())
		log.slow = "/clusters/orders"
		log.take()
		memo := member.NewMemo()
		res, err := member.Apply(ctx, "m1", c, c, objs, memo)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Applied).To(ConsistOf("Secret/order-cnpg/orders-credentials", "Service/order-cnpg/orders", "Cluster/order-cnpg/orders"))
		workloadFirst(g, log.take(), "/apis/postgresql.cnpg.io/v1/namespaces/order-cnpg/clusters/orders")

		// A change to the existing Cluster goes in one round with the
		// rest (here the Service, deleted behind fleetdb's back).
		g.Expect(m.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "order-cnpg", Name: "orders"}})).To(Succeed())
		db.Generation, db.Spec.Replicas = 2, 3
		objs, err = member.Render(member.Params{Database: db, Cluster: "m1", Credentials: testCredentials()})
		g.Expect(err).NotTo(HaveOccurred())
		log.slow = ""
		_, err = member.Apply(ctx, "m1", c, c, objs, memo)
		g.Expect(err).NotTo(HaveOccurred())
		events := log.take()
		g.Expect(events).To(HaveLen(4), "the Service and the Cluster: %v", events)
		g.Expect(events[0]).To(HavePrefix("send "))
		g.Expect(events[1]).To(HavePrefix("send "), "both writes are sent before either is done: %v", events)
	})

	t.Run("a foreign workload is still refused, nothing written", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "order-foreign"}})).To(Succeed())
		foreign := member.NewCNPGCluster()
		foreign.SetNamespace("order-foreign")
		foreign.SetName("orders")
		foreign.SetLabels(map[string]string{"app": "theirs"})
		foreign.Object["spec"] = map[string]any{"instances": int64(1), "storage": map[string]any{"size": "1Gi"}}
		g.Expect(m.Client.Create(ctx, foreign)).To(Succeed())
		objs, err := member.Render(member.Params{Database: cnpgDatabase("order-foreign", 2), Cluster: "m1", Credentials: testCredentials()})
		g.Expect(err).NotTo(HaveOccurred())
		log.take()
		_, err = member.Apply(ctx, "m1", c, c, objs, member.NewMemo())
		g.Expect(err).To(MatchError(ContainSubstring("Cluster order-foreign/orders exists and is not managed by fleetdb")))
		g.Expect(log.take()).To(BeEmpty())
		after := member.NewCNPGCluster()
		g.Expect(m.Client.Get(ctx, key("order-foreign", "orders"), after)).To(Succeed())
		g.Expect(after.GetLabels()).NotTo(HaveKey(fleetv1alpha1.LabelManagedBy))
	})
}
