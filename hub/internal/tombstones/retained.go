package tombstones

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// retainedPrefix marks the data keys of the retained records in the
// tombstones ConfigMap (the tombstones' keys are bare Database UIDs).
const retainedPrefix = "retained."

// maxRetained bounds the retained records kept, like maxTombstones. When
// full, the oldest goes: a Database created again under its name then finds
// no record, and gets a new password (its members show Conflict on the
// retained Secret, which is never replaced) until told to adopt it.
const maxRetained = 500

func isRetainedKey(k string) bool { return strings.HasPrefix(k, retainedPrefix) }

// Retained is the hub's own record of a Database (by UID) whose teardown
// kept its data and credentials Secret in members (deletionPolicy Retain):
// the one thing that lets a later Database of the same namespace/name take
// that Secret's password (and so the data) without being told to. It is
// written before the Database's finalizer goes, so a Database that is gone
// from the hub after a Retain teardown always has one (until evicted, see
// maxRetained).
type Retained struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is the Database's UID.
	UID types.UID `json:"uid"`
	// NamespaceUID is the UID of the hub Namespace the Database was in: a
	// namespace deleted and created again under the same name is another
	// tenant's and adopts nothing.
	NamespaceUID types.UID `json:"namespaceUID"`
	// HubID is the identity of the hub that tore it down.
	HubID string `json:"hubID"`
	// Members are the members the teardown covered (where the Secret and
	// the claims may be kept).
	Members  []string  `json:"members"`
	Recorded time.Time `json:"recorded"`
}

// RecordRetained stores r (keyed by its UID; a record of that UID is replaced).
func (t *Store) RecordRetained(ctx context.Context, r Retained) error {
	r.Members = slices.Sorted(slices.Values(r.Members))
	if r.Recorded.IsZero() {
		r.Recorded = time.Now().UTC()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return t.write(ctx, func(ctx context.Context, cm *corev1.ConfigMap) (map[string]string, error) {
		data := make(map[string]string, len(cm.Data)+1)
		for k, v := range cm.Data {
			data[k] = v
		}
		data[retainedPrefix+string(r.UID)] = string(b)
		all := decodeRetained(ctx, data)
		for len(all) > maxRetained {
			oldest := 0
			for i := range all {
				if all[i].Recorded.Before(all[oldest].Recorded) {
					oldest = i
				}
			}
			ctrl.LoggerFrom(ctx).Info("retained records full: forgetting the oldest; a Database created again under its name "+
				"must be told to adopt its credentials", "database", all[oldest].Namespace+"/"+all[oldest].Name)
			delete(data, retainedPrefix+string(all[oldest].UID))
			all = slices.Delete(all, oldest, oldest+1)
		}
		return data, nil
	})
}

// For returns, from one read, the newest retained record of
// namespace/name (nil if none) and the tombstones (by Database UID) of
// that namespace/name.
func (t *Store) For(ctx context.Context, namespace, name string) (*Retained, map[types.UID]Tombstone, error) {
	var cm corev1.ConfigMap
	if err := t.Live.Get(ctx, t.key(), &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("reading tombstones: %w", err)
	}
	var best *Retained
	for _, r := range decodeRetained(ctx, cm.Data) {
		if r.Namespace == namespace && r.Name == name && (best == nil || r.Recorded.After(best.Recorded)) {
			best = &r
		}
	}
	stones := map[types.UID]Tombstone{}
	for uid, ts := range decodeTombstones(ctx, &cm) {
		if ts.Namespace == namespace && ts.Name == name {
			stones[uid] = ts
		}
	}
	return best, stones, nil
}

func decodeRetained(ctx context.Context, data map[string]string) []Retained {
	var out []Retained
	for k, raw := range data {
		if !isRetainedKey(k) {
			continue
		}
		var r Retained
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "ignoring an unreadable retained record", "key", k)
			continue
		}
		out = append(out, r)
	}
	return out
}
