package member

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// prune deletes the fleetdb objects of the plan's Database that the plan does
// not hold. PersistentVolumeClaims are data and never pruned.
func prune(ctx context.Context, c client.Client, p *plan, memo *Memo) ([]string, error) {
	if p.dbName == "" {
		return nil, nil
	}
	want := map[memoKey]bool{}
	for _, it := range p.items {
		want[it.key] = true
	}
	var (
		pruned []string
		errs   []error
	)
	for _, k := range workloadKinds {
		objs, err := listManaged(ctx, c, k, p.owner)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, obj := range objs {
			key := memoKey{cluster: p.cluster, gvk: k.gvk, namespace: obj.GetNamespace(), name: obj.GetName()}
			if want[key] || obj.GetDeletionTimestamp() != nil {
				continue
			}
			err := c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("pruning %s: %w", k.describe(obj), err))
				continue
			}
			memo.drop(key)
			pruned = append(pruned, k.describe(obj))
		}
	}
	return pruned, errors.Join(errs...)
}
