package hub

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// credentialsName is the hub Secret that keeps a Database's credentials.
func credentialsName(db *fleetv1alpha1.Database) string {
	return db.Name + "-credentials"
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
func ensureCredentials(ctx context.Context, c client.Client, live client.Reader, db *fleetv1alpha1.Database) (map[string][]byte, error) {
	var s corev1.Secret
	key := client.ObjectKey{Namespace: db.Namespace, Name: credentialsName(db)}
	err := c.Get(ctx, key, &s)
	if apierrors.IsNotFound(err) {
		// The cache may not have seen a Secret created a moment ago.
		err = live.Get(ctx, key, &s)
	}
	switch {
	case err == nil:
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
	password, err := randomPassword()
	if err != nil {
		return nil, err
	}
	user := "app"
	s = corev1.Secret{
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
		Data: map[string][]byte{"username": []byte(user), "password": []byte(password)},
	}
	if err := controllerutil.SetControllerReference(db, &s, c.Scheme()); err != nil {
		return nil, fmt.Errorf("owning credentials secret: %w", err)
	}
	if err := c.Create(ctx, &s); err != nil {
		return nil, fmt.Errorf("creating credentials secret: %w", err)
	}
	return s.Data, nil
}

func randomPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
