// Package hubsecret keeps the hub Secrets a Database owns: its credentials
// (created once with crypto/rand, recovered from a member's copy when the
// hub Secret is lost, adopted from an earlier Database of the name, never
// replaced; a rotation edits them under an optimistic lock) and the CA and
// certificates of a PrimaryStandby topology (the CA created once, leaves
// issued and renewed by internal/pki). A Secret of that name that is not the
// Database's is never touched. The Database controller
// (hub/internal/database) calls it; it knows nothing of members or plans.
package hubsecret

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
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

// ForeignCredentialsError is a terminal error: a Secret of that name exists on
// the hub and belongs to someone else.
type ForeignCredentialsError struct{ name string }

func (e ForeignCredentialsError) Error() string {
	return fmt.Sprintf("secret %s exists and is not owned by this Database; rename or remove it", e.name)
}

// EnsureCredentials returns the Database's credentials, generating them once
// with crypto/rand into a hub Secret owned by the Database. The same data goes
// to every member.
//
// A password is never replaced: when the hub Secret is missing (a new
// Database, one recreated under the same name or restored from Git, or a
// deleted Secret), recoverFromMembers first supplies the copy a member holds
// that the hub's own records vouch for (the Database controller decides which);
// it returns an error (the Database controller's errWaitingForCredentials) while a member that may hold
// one cannot be read. Only when no member holds one is a new password
// generated, and only for a Database that never ran anywhere (else it stalls
// with LostCredentialsError).
func EnsureCredentials(ctx context.Context, c client.Client, live client.Reader, db *fleetv1alpha1.Database,
	recoverFromMembers func() (map[string][]byte, error)) (map[string][]byte, error) {
	var s corev1.Secret
	key := client.ObjectKey{Namespace: db.Namespace, Name: member.CredentialsSecretName(db.Name)}
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
			return nil, ForeignCredentialsError{name: key.String()}
		}
		if len(s.Data["password"]) == 0 || len(s.Data["username"]) == 0 {
			return nil, ForeignCredentialsError{name: key.String()}
		}
		return s.Data, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading credentials secret: %w", err)
	}
	return nil, LostCredentialsError{name: key.String()}
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
			if data[member.CredentialsRootPasswordKey], err = RandomBytes(); err != nil {
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

// LostCredentialsError is a terminal error: the hub copy of a running
// Database's credentials is gone and no member could provide one.
type LostCredentialsError struct{ name string }

func (e LostCredentialsError) Error() string {
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

// RandomBytes is a new random password (24 bytes from crypto/rand, base64url).
func RandomBytes() ([]byte, error) {
	p, err := randomPassword()
	return []byte(p), err
}

// PatchCredentials changes the hub credentials Secret's data with an
// optimistic lock, reading it live: it is the record of the rotation, and a
// stale copy must never be written back. change reports whether to write.
func PatchCredentials(ctx context.Context, c client.Client, live client.Reader, db *fleetv1alpha1.Database,
	change func(map[string][]byte) (bool, error)) (map[string][]byte, error) {
	var s corev1.Secret
	if err := live.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: member.CredentialsSecretName(db.Name)}, &s); err != nil {
		return nil, fmt.Errorf("reading credentials secret: %w", err)
	}
	if !metav1.IsControlledBy(&s, db) {
		return nil, ForeignCredentialsError{name: db.Namespace + "/" + member.CredentialsSecretName(db.Name)}
	}
	patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.Data = maps.Clone(s.Data)
	write, err := change(s.Data)
	if err != nil || !write {
		return s.Data, err
	}
	if err := c.Patch(ctx, &s, patch); err != nil {
		return nil, fmt.Errorf("updating credentials secret: %w", err)
	}
	return s.Data, nil
}

// RecoverableCredentials are the keys of a member's credentials Secret that
// restore a lost hub Secret, rotation state included (a member may already
// run on the pending password).
func RecoverableCredentials(data map[string][]byte) map[string][]byte {
	out := map[string][]byte{}
	for _, k := range []string{
		member.CredentialsUsernameKey, member.CredentialsPasswordKey, member.CredentialsRootPasswordKey,
		member.CredentialsPendingPasswordKey, member.CredentialsRotationTokenKey, member.CredentialsRotatedTokenKey,
	} {
		if v := data[k]; len(v) > 0 {
			out[k] = v
		}
	}
	// A member that switched early holds the pending password as its
	// password; the hub's password is the one the others still run on.
	if prev := data[member.CredentialsPreviousPasswordKey]; len(prev) > 0 && len(out[member.CredentialsPendingPasswordKey]) > 0 {
		out[member.CredentialsPasswordKey] = prev
	}
	return out
}
