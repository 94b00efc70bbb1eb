package database

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// credentialsName is the hub Secret that keeps a Database's credentials.
func credentialsName(db *fleetv1alpha1.Database) string {
	return member.CredentialsSecretName(db.Name)
}

// errForeignCredentials is a terminal error: a Secret of that name exists on
// the hub and belongs to someone else.
type errForeignCredentials struct{ name string }

func (e errForeignCredentials) Error() string {
	return fmt.Sprintf("secret %s exists and is not owned by this Database; rename or remove it", e.name)
}

// ensureCredentials returns the Database's credentials, generating them once
// with crypto/rand into a hub Secret owned by the Database. The same data goes
// to every member.
//
// A password is never replaced: when the hub Secret is missing (a new
// Database, one recreated under the same name or restored from Git, or a
// deleted Secret), recoverFromMembers first supplies the copy a member holds;
// it returns an error (errWaitingForCredentials) while a member that may hold
// one cannot be read. Only when no member holds one is a new password
// generated, and only for a Database that never ran anywhere (else it stalls
// with errLostCredentials).
func ensureCredentials(ctx context.Context, c client.Client, live client.Reader, db *fleetv1alpha1.Database,
	recoverFromMembers func() (map[string][]byte, error)) (map[string][]byte, error) {
	var s corev1.Secret
	key := client.ObjectKey{Namespace: db.Namespace, Name: credentialsName(db)}
	err := c.Get(ctx, key, &s)
	if apierrors.IsNotFound(err) {
		data, rerr := recoverFromMembers()
		if rerr != nil {
			return nil, rerr
		}
		if data != nil || len(db.Status.Clusters) == 0 {
			created, cerr := createCredentials(ctx, c, db, key, data)
			if !apierrors.IsAlreadyExists(cerr) {
				return created, cerr
			}
		}
		// The cache may not have seen a Secret created a moment ago.
		err = live.Get(ctx, key, &s)
	}
	switch {
	case err == nil:
		if leftoverOf(&s, db) {
			// An earlier Database of this name (deleted, not yet garbage
			// collected) left it: take it over, credentials and all.
			if err := adopt(ctx, c, db, &s); err != nil {
				return nil, err
			}
		}
		if !metav1.IsControlledBy(&s, db) {
			return nil, errForeignCredentials{name: key.String()}
		}
		if len(s.Data["password"]) == 0 || len(s.Data["username"]) == 0 {
			return nil, errForeignCredentials{name: key.String()}
		}
		return s.Data, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading credentials secret: %w", err)
	}
	return nil, errLostCredentials{name: key.String()}
}

// leftoverOf reports whether s is the credentials Secret of an earlier
// Database of db's name: fleetdb's labels for it, and controlled by a
// Database of that name with another UID (two Databases of one name cannot
// exist at once, so that one is gone).
func leftoverOf(s *corev1.Secret, db *fleetv1alpha1.Database) bool {
	owner := metav1.GetControllerOf(s)
	l := s.Labels
	return owner != nil && owner.Kind == "Database" && owner.Name == db.Name && owner.UID != db.UID &&
		strings.HasPrefix(owner.APIVersion, fleetv1alpha1.GroupVersion.Group+"/") &&
		l[fleetv1alpha1.LabelManagedBy] == fleetv1alpha1.ManagedByValue &&
		l[fleetv1alpha1.LabelDatabaseNamespace] == db.Namespace && l[fleetv1alpha1.LabelDatabaseName] == db.Name
}

// adopt makes db the controller of s in place of the earlier Database, with
// an optimistic lock (the garbage collector may be deleting it).
func adopt(ctx context.Context, c client.Client, db *fleetv1alpha1.Database, s *corev1.Secret) error {
	patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.OwnerReferences = nil
	if err := controllerutil.SetControllerReference(db, s, c.Scheme()); err != nil {
		return fmt.Errorf("owning credentials secret: %w", err)
	}
	if err := c.Patch(ctx, s, patch); err != nil {
		return fmt.Errorf("adopting the credentials secret of an earlier Database %s: %w", db.Name, err)
	}
	return nil
}

// createCredentials creates the hub Secret with data, or with new random
// credentials when data is nil. An AlreadyExists error is returned as is.
func createCredentials(ctx context.Context, c client.Client, db *fleetv1alpha1.Database, key client.ObjectKey, data map[string][]byte) (map[string][]byte, error) {
	if data == nil {
		password, err := randomPassword()
		if err != nil {
			return nil, err
		}
		data = map[string][]byte{"username": []byte("app"), "password": []byte(password)}
		if db.Spec.Engine == fleetv1alpha1.EngineMySQL {
			// root's own password, never the application user's (rotation
			// changes the latter only).
			if data[member.CredentialsRootPasswordKey], err = randomBytes(); err != nil {
				return nil, err
			}
		}
	}
	s, err := newHubSecret(db, key, data, c.Scheme())
	if err != nil {
		return nil, fmt.Errorf("owning credentials secret: %w", err)
	}
	if err := c.Create(ctx, s); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		return nil, fmt.Errorf("creating credentials secret: %w", err)
	}
	return s.Data, nil
}

// newHubSecret is a hub Secret of the Database (its credentials, its
// topology PKI): the fleetdb labels, the Database as its controller (it goes
// with the Database), data.
func newHubSecret(db *fleetv1alpha1.Database, key client.ObjectKey, data map[string][]byte, scheme *runtime.Scheme) (*corev1.Secret, error) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace,
			Name:      key.Name,
			Labels: map[string]string{
				fleetv1alpha1.LabelManagedBy:         fleetv1alpha1.ManagedByValue,
				fleetv1alpha1.LabelDatabaseNamespace: db.Namespace,
				fleetv1alpha1.LabelDatabaseName:      db.Name,
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	if err := controllerutil.SetControllerReference(db, s, scheme); err != nil {
		return nil, err
	}
	return s, nil
}

// errLostCredentials is a terminal error: the hub copy of a running
// Database's credentials is gone and no member could provide one.
type errLostCredentials struct{ name string }

func (e errLostCredentials) Error() string {
	return fmt.Sprintf("credentials secret %s is missing on the hub and no reachable member holds a copy; "+
		"restore it (a new password would lock clients out of the running databases)", e.name)
}

func randomPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func randomBytes() ([]byte, error) {
	p, err := randomPassword()
	return []byte(p), err
}
