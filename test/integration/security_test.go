package integration

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// secretRequests records every request the hub manager sends to the hub API
// server about Secrets.
type secretRequests struct {
	mu   sync.Mutex
	reqs []secretRequest
}

type secretRequest struct {
	method string
	url    *url.URL
}

func (s *secretRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if strings.Contains(req.URL.Path, "/secrets") {
			u := *req.URL
			s.mu.Lock()
			s.reqs = append(s.reqs, secretRequest{method: req.Method, url: &u})
			s.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (s *secretRequests) all() []secretRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]secretRequest(nil), s.reqs...)
}

// TestSecurity proves issue 10's hub-side guarantees on real API servers:
// deletion protection (admission policy and hub), no member address in a
// tenant's status, and no Secret read that the hub does not own or reference.
func TestSecurity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	secrets := &secretRequests{}
	e := startEnvWith(t, envOptions{hubWrap: secrets.wrap}, "m1", "m2")
	e.sim.enable("m1", true)
	e.sim.enable("m2", true)
	g := NewWithT(t)
	ns := e.namespace("secure")
	// Secrets the hub has no business with: one in a namespace without
	// Databases, one next to a Database.
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: e.namespace("bystander"), Name: "unrelated"}, StringData: map[string]string{"token": "t"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "neighbour"}, StringData: map[string]string{"token": "t"}},
	} {
		g.Expect(e.hub.Create(e.ctx, s)).To(Succeed())
	}

	t.Run("deletion protection: the API server refuses the delete", func(t *testing.T) {
		g := NewWithT(t)
		db := newDB(ns, "vault", "m1")
		db.Spec.DeletionProtection = true
		g.Expect(e.hub.Create(e.ctx, db)).To(Succeed())
		e.waitDatabaseReady(ns, "vault")
		err := e.hub.Delete(e.ctx, db)
		g.Expect(err).To(HaveOccurred(), "a protected Database was deleted")
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
		g.Expect(err.Error()).To(And(ContainSubstring("secure/vault"), ContainSubstring("spec.deletionProtection: true")))
		g.Expect(e.getDB(ns, "vault").DeletionTimestamp).To(BeNil())
	})

	t.Run("deletion protection: the hub tears nothing down while it is set", func(t *testing.T) {
		g := NewWithT(t)
		// A hub API server without the policy: the hub itself holds.
		g.Expect(e.hub.Delete(e.ctx, unstructuredBinding())).To(Succeed())
		t.Cleanup(func() {
			g.Expect(fleet.ApplyManifests(e.ctx, e.hub, fleet.HubPolicies...)).To(Succeed())
		})
		g.Eventually(func() error { return e.hub.Delete(e.ctx, e.getDB(ns, "vault")) }).
			WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		g.Eventually(func(g Gomega) {
			db := e.getDB(ns, "vault")
			stalled := condition(db.Status.Conditions, fleetv1alpha1.ConditionStalled)
			g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(stalled.Reason).To(Equal(fleetv1alpha1.ReasonDeletionProtected))
			g.Expect(stalled.Message).To(ContainSubstring("deletionProtection"))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		var sts appsv1.StatefulSet
		g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "vault"}, &sts)).To(Succeed(),
			"the member's workload is still there")
		g.Expect(sts.DeletionTimestamp).To(BeNil())

		db := e.getDB(ns, "vault")
		patch := client.MergeFrom(db.DeepCopy())
		db.Spec.DeletionProtection = false
		g.Expect(e.hub.Patch(e.ctx, db, patch)).To(Succeed())
		g.Eventually(func(g Gomega) {
			err := e.hub.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "vault"}, &fleetv1alpha1.Database{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Database is gone once unprotected: %v", err)
			err = e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "vault"}, &appsv1.StatefulSet{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "and so is its workload: %v", err)
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	})

	t.Run("a tenant's status names no member address", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(e.hub.Create(e.ctx, newDB(ns, "orders", "m2"))).To(Succeed())
		e.waitDatabaseReady(ns, "orders")
		e.proxies["m2"].Cut()
		t.Cleanup(func() { _ = e.proxies["m2"].Restore() })
		addr := e.proxies["m2"].Addr()
		host := addr[:strings.LastIndex(addr, ":")]
		g.Eventually(func(g Gomega) {
			db := e.getDB(ns, "orders")
			entry := clusterEntry(db, "m2")
			g.Expect(entry.Phase).To(Equal(fleetv1alpha1.ClusterPhaseUnreachable))
			g.Expect(entry.Message).NotTo(BeEmpty())
			texts := []string{entry.Message}
			for _, c := range db.Status.Conditions {
				texts = append(texts, c.Message)
			}
			for _, text := range texts {
				g.Expect(text).NotTo(Or(ContainSubstring(addr), ContainSubstring(host), ContainSubstring("://")), "tenant-visible: %q", text)
			}
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		// The platform-visible MemberCluster keeps the details.
		g.Eventually(func(g Gomega) {
			var mc fleetv1alpha1.MemberCluster
			g.Expect(e.hub.Get(e.ctx, client.ObjectKey{Name: "m2"}, &mc)).To(Succeed())
			g.Expect(condition(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady).Message).To(ContainSubstring(addr))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	})

	t.Run("the hub reads no Secret it does not own or reference", func(t *testing.T) {
		g := NewWithT(t)
		reqs := secrets.all()
		g.Expect(reqs).NotTo(BeEmpty(), "the hub reads kubeconfig and credentials Secrets")
		owned := fleetv1alpha1.LabelManagedBy + "=" + fleetv1alpha1.ManagedByValue
		sawCredentials := false
		for _, r := range reqs {
			u := r.url
			parts := strings.Split(strings.Trim(u.Path, "/"), "/")
			// api/v1/secrets, api/v1/namespaces/<ns>/secrets[/<name>]
			g.Expect(u.Path).NotTo(Or(HaveSuffix("/unrelated"), HaveSuffix("/neighbour")), "read %s", u)
			switch {
			case len(parts) == 3: // every namespace: none since issue 25, item 12
				g.Expect(u.Path).To(BeEmpty(), "a cluster-wide Secret request: %s %s", r.method, u)
			case len(parts) == 5 && r.method == http.MethodGet && parts[3] != hubNS: // a list or watch outside the hub's namespace
				g.Expect(u.Query().Get("labelSelector")).To(Equal(owned), "%s", u)
			}
			sawCredentials = sawCredentials || (len(parts) >= 5 && parts[3] == ns)
		}
		g.Expect(sawCredentials).To(BeTrue(), "the hub did work with the credentials Secrets of its Databases")
	})
}

// unstructuredBinding is deploy/hub's deletion-protection binding, by name.
func unstructuredBinding() client.Object {
	objs, err := fleet.ReadManifests(fleet.HubPolicies[0])
	if err != nil {
		panic(err)
	}
	for _, o := range objs {
		if o.GetKind() == "ValidatingAdmissionPolicyBinding" {
			return o
		}
	}
	panic("no ValidatingAdmissionPolicyBinding in " + fleet.HubPolicies[0])
}

// waitDatabaseReady waits for the Database's Ready condition.
func (e *env) waitDatabaseReady(ns, name string) {
	NewWithT(e.t).Eventually(func(g Gomega) {
		db := e.getDB(ns, name)
		g.Expect(condition(db.Status.Conditions, fleetv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
