package tombstones

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// maxTombstones bounds the tombstones kept (a ConfigMap holds 1 MiB). When
// full, the oldest goes: its leftovers are then never swept, which keeps
// data rather than deleting it.
const maxTombstones = 500

// Tombstone is the hub's own record of a Database (by UID) whose teardown it
// skipped in some members (unreachable past spec.teardown.unreachableTimeout):
// the reconnect sweep collects each member's leftovers with the policy
// recorded for that member last (PolicyFor), and never with anything read
// back from the member. It acts only on objects labelled with the UID.
type Tombstone struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Policy is the policy of members without an entry in Policies
	// (tombstones written before Policies existed: one policy for all).
	Policy fleetv1alpha1.DeletionPolicy `json:"policy"`
	// Policies is the policy recorded last for each member.
	Policies map[string]fleetv1alpha1.DeletionPolicy `json:"policies,omitempty"`
	// NamespaceUID is the UID of the Database's hub Namespace (empty in
	// tombstones written before it was recorded): a later Database of the
	// name takes a copy of the credentials it left only in that Namespace.
	NamespaceUID types.UID `json:"namespaceUID,omitempty"`
	// Members still to sweep.
	Members  []string  `json:"members"`
	Recorded time.Time `json:"recorded"`
}

// PolicyFor is the policy to collect member's leftovers with: the one
// recorded for it last.
func (ts Tombstone) PolicyFor(member string) fleetv1alpha1.DeletionPolicy {
	if p, ok := ts.Policies[member]; ok {
		return p
	}
	return ts.Policy
}

// Store keeps the tombstones in the TombstonesConfigMap of the hub
// namespace, one data key per Database UID. Reads are live (the hub caches
// no ConfigMaps); writes are serialised in the process and optimistic on
// the server.
type Store struct {
	Client    client.Client
	Live      client.Reader
	Namespace string
	mu        sync.Mutex
}

func (t *Store) key() client.ObjectKey {
	return client.ObjectKey{Namespace: t.Namespace, Name: fleetv1alpha1.TombstonesConfigMap}
}

// All returns the tombstones by Database UID.
func (t *Store) All(ctx context.Context) (map[types.UID]Tombstone, error) {
	var cm corev1.ConfigMap
	if err := t.Live.Get(ctx, t.key(), &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return map[types.UID]Tombstone{}, nil
		}
		return nil, fmt.Errorf("reading tombstones: %w", err)
	}
	return decodeTombstones(ctx, &cm), nil
}

// Record adds member to the tombstone of db with policy: the latest policy
// recorded for (UID, member) is the one the sweep uses (a placement removal
// recorded with spec.teardown.onPlacementRemoval, then the deletion with
// spec.deletionPolicy: the deletion's applies).
// nsUID is the UID of the Database's hub Namespace.
func (t *Store) Record(ctx context.Context, db *fleetv1alpha1.Database, nsUID types.UID, member string, policy fleetv1alpha1.DeletionPolicy) error {
	return t.update(ctx, func(all map[types.UID]Tombstone) {
		ts, ok := all[db.UID]
		if !ok {
			ts = Tombstone{Namespace: db.Namespace, Name: db.Name, Policy: policy, Recorded: time.Now().UTC()}
		}
		if ts.NamespaceUID == "" {
			ts.NamespaceUID = nsUID
		}
		if !slices.Contains(ts.Members, member) {
			ts.Members = append(ts.Members, member)
		}
		if ts.Policies == nil {
			ts.Policies = map[string]fleetv1alpha1.DeletionPolicy{}
		}
		ts.Policies[member] = policy
		all[db.UID] = ts
		for len(all) > maxTombstones {
			oldest := db.UID
			for uid, o := range all {
				if o.Recorded.Before(all[oldest].Recorded) {
					oldest = uid
				}
			}
			ctrl.LoggerFrom(ctx).Info("tombstones full: forgetting the oldest; its leftovers will be kept, not swept",
				"database", all[oldest].Namespace+"/"+all[oldest].Name, "members", all[oldest].Members)
			delete(all, oldest)
		}
	})
}

// Swept removes member from the tombstone uid, and the tombstone once no member is left.
func (t *Store) Swept(ctx context.Context, uid types.UID, member string) error {
	return t.update(ctx, func(all map[types.UID]Tombstone) {
		ts, ok := all[uid]
		if !ok {
			return
		}
		ts.Members = slices.DeleteFunc(ts.Members, func(m string) bool { return m == member })
		delete(ts.Policies, member)
		if len(ts.Members) == 0 {
			delete(all, uid)
		} else {
			all[uid] = ts
		}
	})
}

// update applies change to the tombstones and writes them back (the
// retained records kept as they are).
func (t *Store) update(ctx context.Context, change func(map[types.UID]Tombstone)) error {
	return t.write(ctx, func(ctx context.Context, cm *corev1.ConfigMap) (map[string]string, error) {
		all := decodeTombstones(ctx, cm)
		change(all)
		data := make(map[string]string, len(cm.Data))
		for k, v := range cm.Data {
			if isRetainedKey(k) {
				data[k] = v
			}
		}
		for uid, ts := range all {
			b, err := json.Marshal(ts)
			if err != nil {
				return nil, err
			}
			data[string(uid)] = string(b)
		}
		return data, nil
	})
}

// write replaces the ConfigMap's data with what change makes of the live
// one, creating the ConfigMap when it is missing; serialised in the process,
// optimistic on the server (retried on a conflict).
func (t *Store) write(ctx context.Context, change func(context.Context, *corev1.ConfigMap) (map[string]string, error)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		err := t.Live.Get(ctx, t.key(), &cm)
		create := apierrors.IsNotFound(err)
		if err != nil && !create {
			return fmt.Errorf("reading tombstones: %w", err)
		}
		data, err := change(ctx, &cm)
		if err != nil {
			return err
		}
		cm.Data = data
		if create {
			cm.ObjectMeta = metav1.ObjectMeta{Namespace: t.Namespace, Name: fleetv1alpha1.TombstonesConfigMap,
				Labels: map[string]string{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}}
			err = t.Client.Create(ctx, &cm, client.FieldOwner(fleetv1alpha1.FieldManager))
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), cm.Name, err)
			}
		} else {
			err = t.Client.Update(ctx, &cm, client.FieldOwner(fleetv1alpha1.FieldManager))
		}
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("writing tombstones: %w", err)
		}
		return err
	})
}

func decodeTombstones(ctx context.Context, cm *corev1.ConfigMap) map[types.UID]Tombstone {
	all := make(map[types.UID]Tombstone, len(cm.Data))
	for uid, raw := range cm.Data {
		if isRetainedKey(uid) {
			continue
		}
		var ts Tombstone
		if err := json.Unmarshal([]byte(raw), &ts); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "ignoring an unreadable tombstone", "uid", uid)
			continue
		}
		all[types.UID(uid)] = ts
	}
	return all
}
