package hubsecret

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/pki"
)

// topologyPKIName is the hub Secret with the Database's CA (certificate and
// private key) and the certificates it issued. Only the hub reads it: the
// CA key never goes to a member.
func topologyPKIName(db *fleetv1alpha1.Database) string { return db.Name + "-topology-pki" }

// EnsureTopologyPKI keeps the Database's replication PKI in its hub Secret
// (owned by the Database, like the credentials) and returns each member's
// certificates. hosts maps every placed member to its replication host.
//
// The CA is created once and never replaced: a new CA would break trust
// between members until every one of them had the new certificates. Leaf
// certificates (a server certificate per member for its host and in-cluster
// names, one streaming_replica client certificate) are issued when missing,
// when they no longer match (another host, another CA) and when less than
// certRenewBefore of their life remains. A Secret of that name that is not
// the Database's is never touched (pki.Error).
func EnsureTopologyPKI(ctx context.Context, c client.Client, live client.Reader, db *fleetv1alpha1.Database,
	hosts map[string]string, now time.Time) (pki.Set, error) {
	var s corev1.Secret
	key := client.ObjectKey{Namespace: db.Namespace, Name: topologyPKIName(db)}
	err := c.Get(ctx, key, &s)
	if apierrors.IsNotFound(err) {
		err = live.Get(ctx, key, &s) // the cache may lag behind a create
	}
	switch {
	case apierrors.IsNotFound(err):
		return createTopologyPKI(ctx, c, db, key, hosts, now)
	case err != nil:
		return pki.Set{}, fmt.Errorf("reading the topology PKI secret: %w", err)
	}
	if leftoverOf(&s, db) {
		if err := adopt(ctx, c, db, &s); err != nil {
			return pki.Set{}, err
		}
	}
	if !metav1.IsControlledBy(&s, db) {
		return pki.Set{}, pki.Error{Msg: fmt.Sprintf("secret %s exists and is not owned by this Database; rename or remove it", key)}
	}
	data, set, err := pki.Issue(db, s.Data, hosts, now)
	if err != nil {
		return pki.Set{}, err
	}
	if maps.EqualFunc(data, s.Data, bytes.Equal) {
		return set, nil // a member dropped from placement only removes entries
	}
	patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.Data = data
	if err := c.Patch(ctx, &s, patch); err != nil {
		return pki.Set{}, fmt.Errorf("renewing the topology certificates: %w", err)
	}
	return set, nil
}

// createTopologyPKI creates the hub Secret with a new CA and every certificate.
func createTopologyPKI(ctx context.Context, c client.Client, db *fleetv1alpha1.Database, key client.ObjectKey,
	hosts map[string]string, now time.Time) (pki.Set, error) {
	data, set, err := pki.Issue(db, nil, hosts, now)
	if err != nil {
		return pki.Set{}, err
	}
	s, err := newHubSecret(db, key, data, c.Scheme())
	if err != nil {
		return pki.Set{}, fmt.Errorf("owning the topology PKI secret: %w", err)
	}
	if err := c.Create(ctx, s); err != nil {
		// AlreadyExists: another pass created it; the next reconcile reads it.
		return pki.Set{}, fmt.Errorf("creating the topology PKI secret: %w", err)
	}
	return set, nil
}
