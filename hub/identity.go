package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// The hub reads and writes its identity and tombstone ConfigMaps in the hub
// namespace only: deploy/rbac/leader_election_role.yaml grants that (a
// hand-written Role, like the leader election's).

// identityTimeout bounds reading or creating the hub identity at start.
const identityTimeout = 30 * time.Second

// ensureHubIdentity returns the hub's identity: the value kept in the
// HubIdentityConfigMap of the hub namespace, generated (16 random bytes, hex)
// and stored on first start. Every member object the hub writes carries it
// (LabelHubID), so that two hubs sharing a member never touch each other's
// objects. Deleting the ConfigMap gives the hub a new identity: its earlier
// objects then look like another hub's and are left alone (never deleted).
func ensureHubIdentity(ctx context.Context, c client.Client, namespace string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, identityTimeout)
	defer cancel()
	key := client.ObjectKey{Namespace: namespace, Name: fleetv1alpha1.HubIdentityConfigMap}
	for attempt := 0; attempt < 2; attempt++ {
		var cm corev1.ConfigMap
		err := c.Get(ctx, key, &cm)
		if err == nil {
			id := cm.Data[fleetv1alpha1.HubIdentityKey]
			if errs := validation.IsValidLabelValue(id); id == "" || len(errs) > 0 {
				return "", fmt.Errorf("hub identity ConfigMap %s holds no valid %q (a label value): fix or delete it", key, fleetv1alpha1.HubIdentityKey)
			}
			return id, nil
		}
		if !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("reading the hub identity %s: %w", key, err)
		}
		id, err := newHubID()
		if err != nil {
			return "", err
		}
		cm = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fleetv1alpha1.HubIdentityConfigMap,
				Labels: map[string]string{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}},
			Data: map[string]string{fleetv1alpha1.HubIdentityKey: id},
		}
		err = c.Create(ctx, &cm, client.FieldOwner(fleetv1alpha1.FieldManager))
		switch {
		case err == nil:
			return id, nil
		case apierrors.IsAlreadyExists(err):
			continue // another replica created it first: read theirs
		case apierrors.IsNotFound(err):
			return "", fmt.Errorf("the hub namespace %s does not exist: create it (deploy/hub does)", namespace)
		default:
			return "", fmt.Errorf("creating the hub identity %s: %w", key, err)
		}
	}
	return "", fmt.Errorf("the hub identity %s could not be read or created", key)
}

func newHubID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating the hub identity: %w", err)
	}
	return hex.EncodeToString(b), nil
}
