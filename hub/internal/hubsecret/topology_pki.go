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
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/pki"
	"github.com/fleetdb/fleetdb/member"
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
	var set pki.Set
	err := ensurePKI(ctx, c, live, db, topologyPKIName(db), "topology", func(old map[string][]byte) (map[string][]byte, error) {
		data, s, err := pki.Issue(db, old, hosts, now)
		set = s
		return data, err
	})
	return set, err
}

// instancePKIName is the hub Secret with a StatefulSet-backend postgres
// Database's instance CA (certificate and private key) and the server
// certificate it issued. Only the hub reads it.
func instancePKIName(database string) string { return database + "-instance-pki" }

// EnsureInstancePKI keeps a StatefulSet-backend postgres Database's instance
// PKI in its hub Secret (owned by the Database) and returns what every
// member gets: the CA certificate and the instances' server certificate and
// key (pki.IssueInstance). As the topology's, the CA is created once and
// never replaced, and the server certificate is issued again when it no
// longer matches or less than the renewal margin of its life remains; a
// Secret of that name that is not the Database's is never touched
// (pki.Error).
func EnsureInstancePKI(ctx context.Context, c client.Client, live client.Reader, db *fleetv1alpha1.Database,
	now time.Time) (pki.InstanceSet, error) {
	var set pki.InstanceSet
	err := ensurePKI(ctx, c, live, db, instancePKIName(db.Name), "instance", func(old map[string][]byte) (map[string][]byte, error) {
		data, s, err := pki.IssueInstance(db, old, now)
		set = s
		return data, err
	})
	return set, err
}

// InstanceCertificates reads, for a sharded hub's member owner, the
// instance certificates the leader issued for the Database named by key
// (uid): only from the hub Secret that Database controls, and only the
// certificate whose fingerprint the leader's placement names (the cache may
// still hold the one before a renewal: then the live object is read).
func InstanceCertificates(ctx context.Context, c client.Client, live client.Reader, key client.ObjectKey, uid types.UID,
	fingerprint string) (member.InstanceCertificates, error) {
	name := client.ObjectKey{Namespace: key.Namespace, Name: instancePKIName(key.Name)}
	certs, err := instanceCertificatesIn(ctx, c, name, uid, fingerprint)
	if err != nil {
		certs, err = instanceCertificatesIn(ctx, live, name, uid, fingerprint)
	}
	return certs, err
}

// instanceCertificatesIn is InstanceCertificates from one reader.
func instanceCertificatesIn(ctx context.Context, r client.Reader, name client.ObjectKey, uid types.UID,
	fingerprint string) (member.InstanceCertificates, error) {
	var s corev1.Secret
	if err := r.Get(ctx, name, &s); err != nil {
		return member.InstanceCertificates{}, fmt.Errorf("reading the instance PKI secret: %w", err)
	}
	if owner := metav1.GetControllerOf(&s); owner == nil || owner.UID != uid {
		return member.InstanceCertificates{}, fmt.Errorf("instance PKI secret %s is not controlled by the Database", name.Name)
	}
	certs, ok := pki.InstanceCertificatesOf(s.Data)
	if !ok || certs.Fingerprint() != fingerprint {
		return member.InstanceCertificates{}, fmt.Errorf("instance PKI secret %s does not hold the certificate the plan names yet", name.Name)
	}
	return certs, nil
}

// ensurePKI creates or renews the hub Secret name of db with the data issue
// returns from the Secret's current data (nil: none yet).
func ensurePKI(ctx context.Context, c client.Client, live client.Reader, db *fleetv1alpha1.Database, name, what string,
	issue func(old map[string][]byte) (map[string][]byte, error)) error {
	var s corev1.Secret
	key := client.ObjectKey{Namespace: db.Namespace, Name: name}
	err := c.Get(ctx, key, &s)
	if apierrors.IsNotFound(err) {
		err = live.Get(ctx, key, &s) // the cache may lag behind a create
	}
	switch {
	case apierrors.IsNotFound(err):
		return createPKI(ctx, c, db, key, what, issue)
	case err != nil:
		return fmt.Errorf("reading the %s PKI secret: %w", what, err)
	}
	if leftoverOf(&s, db) {
		if err := adopt(ctx, c, db, &s); err != nil {
			return err
		}
	}
	if !metav1.IsControlledBy(&s, db) {
		return pki.Error{Msg: fmt.Sprintf("secret %s exists and is not owned by this Database; rename or remove it", key)}
	}
	data, err := issue(s.Data)
	if err != nil {
		return err
	}
	if maps.EqualFunc(data, s.Data, bytes.Equal) {
		return nil // a member dropped from placement only removes entries
	}
	patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.Data = data
	if err := c.Patch(ctx, &s, patch); err != nil {
		return fmt.Errorf("renewing the %s certificates: %w", what, err)
	}
	return nil
}

// createPKI creates the hub Secret with a new CA and every certificate.
func createPKI(ctx context.Context, c client.Client, db *fleetv1alpha1.Database, key client.ObjectKey, what string,
	issue func(old map[string][]byte) (map[string][]byte, error)) error {
	data, err := issue(nil)
	if err != nil {
		return err
	}
	s, err := newHubSecret(db, key, data, c.Scheme())
	if err != nil {
		return fmt.Errorf("owning the %s PKI secret: %w", what, err)
	}
	if err := c.Create(ctx, s); err != nil {
		// AlreadyExists: another pass created it; the next reconcile reads it.
		return fmt.Errorf("creating the %s PKI secret: %w", what, err)
	}
	return nil
}
