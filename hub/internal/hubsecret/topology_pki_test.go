package hubsecret

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// A sharded hub's member owner renders the instance certificate the
// leader's placement names, read from the hub Secret the Database controls:
// not one of another Database (same name, other uid), and not an older
// certificate its cache still holds after a renewal (it reads the live
// object then, and fails until the renewal is there).
func TestInstanceCertificatesForOwner(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(fleetv1alpha1.AddToScheme(scheme)).To(Succeed())
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "uid-1"}}
	db.Spec.Engine, db.Spec.Backend = fleetv1alpha1.EnginePostgres, fleetv1alpha1.BackendStatefulSet
	key := client.ObjectKeyFromObject(db)

	live := fake.NewClientBuilder().WithScheme(scheme).Build()
	now := time.Now()
	_, err := EnsureInstancePKI(ctx, live, live, db, now)
	g.Expect(err).NotTo(HaveOccurred())
	// The first pass creates the Secret; the second reads what it holds.
	set, err := EnsureInstancePKI(ctx, live, live, db, now)
	g.Expect(err).NotTo(HaveOccurred())
	want := set.Certs.Fingerprint()

	var stored corev1.Secret
	g.Expect(live.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "db-instance-pki"}, &stored)).To(Succeed())
	g.Expect(stored.Data).To(HaveKey("ca.key"))

	got, err := InstanceCertificates(ctx, live, live, key, db.UID, want)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(set.Certs), "the certificates the leader's plan has")
	g.Expect(got.Fingerprint()).To(Equal(want))

	_, err = InstanceCertificates(ctx, live, live, key, "uid-2", want)
	g.Expect(err).To(MatchError(ContainSubstring("not controlled by the Database")))

	// A cache that still holds the certificate before a renewal: the live
	// object is read.
	stale := stored.DeepCopy()
	stale.ResourceVersion = ""
	stale.Data = map[string][]byte{"ca.crt": stored.Data["ca.crt"], "instance.crt": []byte("old"), "instance.key": []byte("old")}
	cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(stale).Build()
	got, err = InstanceCertificates(ctx, cache, live, key, db.UID, want)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Fingerprint()).To(Equal(want))

	// Neither holds it yet: an error (the sync retries), never the old one.
	_, err = InstanceCertificates(ctx, cache, cache, key, db.UID, want)
	g.Expect(err).To(MatchError(ContainSubstring("does not hold the certificate the plan names")))
}
