package member

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-multierror"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Teardown removes or releases, according to policy, the member objects of
// the hub Database namespace/name, found by SelectorFor (StatefulSets,
// PodDisruptionBudgets, Services, ConfigMaps, Secrets, PersistentVolumeClaims):
//
//   - Delete (also the default) deletes them all, PersistentVolumeClaims included;
//   - Retain deletes the workload, Services, ConfigMap and PodDisruptionBudget
//     but keeps the PersistentVolumeClaims and the credentials Secret, and
//     strips fleetdb's labels from them; the certificate Secrets of a
//     PrimaryStandby Database and the StatefulSet backend's instance TLS
//     Secret (private keys, issued anew for a new Database) are deleted;
//   - Orphan deletes nothing and strips fleetdb's labels from every object.
//
// Jobs are not touched: a Job that carries fleetdb's labels may be anyone's,
// and only the hub can tell its own (its job ledger). The hub removes its
// credential rotation Jobs itself, whatever the policy (RotationUnderWay says
// when there may be some).
//
// Objects are deleted with background propagation; NotFound counts as done.
// A delete memo remembers sending is not sent again (memo may be nil).
// Only o's objects are touched (see Owner): never another hub's.
// PersistentVolumeClaims are deleted only in a pass that finds no
// StatefulSet of the Database left, never in the pass that deletes it: the
// caller reads the policy again for the next pass, so a change to Retain
// made meanwhile keeps the data.
// The Namespace is never deleted. Teardown is done when a fresh list finds
// nothing labelled for the Database any more; until then call it again (a
// volume claim may wait for its pods to go, for instance).
func Teardown(ctx context.Context, c client.Client, o Owner, policy fleetv1alpha1.DeletionPolicy, memo *Memo) (done bool, err error) {
	namespace, name := o.Namespace, o.Name
	fail := func(err error) (bool, error) { return false, fmt.Errorf("teardown %s/%s: %w", namespace, name, err) }
	var remove, release []managedKind
	all := append(append([]managedKind{}, workloadKinds...), pvcKind)
	switch policy {
	case fleetv1alpha1.DeletionPolicyDelete, "":
		remove = append([]managedKind{}, workloadKinds...)
	case fleetv1alpha1.DeletionPolicyRetain:
		for _, k := range workloadKinds {
			if k.gvk.Kind == "Secret" {
				release = append(release, k)
			} else {
				remove = append(remove, k)
			}
		}
		release = append(release, pvcKind)
	case fleetv1alpha1.DeletionPolicyOrphan:
		release = append(append([]managedKind{}, workloadKinds...), pvcKind)
	default:
		return false, fmt.Errorf("teardown %s/%s: unknown deletion policy %q", namespace, name, policy)
	}

	// What decides this pass is read at once, not one read after another:
	// the workload (claims go only once it is gone) and the CloudNativePG
	// Cluster's own step.
	var (
		workload       []client.Object
		cnpgDone       bool
		wlErr, cnpgErr error
		deleteOnDelete = policy == fleetv1alpha1.DeletionPolicyDelete || policy == ""
	)
	runAll([]func() error{
		func() error {
			if deleteOnDelete {
				// Any StatefulSet of the name holds the claims back, also
				// one of another UID (ExactUID): a later Database's
				// StatefulSet may use claims labelled with this one's UID.
				workload, wlErr = listManaged(ctx, c, workloadKinds[0], o.anyUID())
			}
			return nil
		},
		// A CloudNativePG Cluster goes (or is released) before what it uses.
		func() error { cnpgDone, cnpgErr = teardownCNPG(ctx, c, o, policy, memo); return nil },
	})
	if err := errors.Join(wlErr, cnpgErr); err != nil {
		return fail(err)
	}
	if deleteOnDelete && len(workload) == 0 {
		remove = append(remove, pvcKind)
	}
	if !cnpgDone {
		return false, nil
	}
	if err := removeAndRelease(ctx, c, o, policy, remove, release, memo); err != nil {
		return fail(err)
	}
	return nothingLeft(ctx, c, o, all)
}

// removeAndRelease takes one teardown step: the workload goes first, on its
// own, so that its pods stop before what they use goes; then every other
// kind at once: two round trips per member, not one per object.
func removeAndRelease(ctx context.Context, c client.Client, o Owner, policy fleetv1alpha1.DeletionPolicy, remove, release []managedKind, memo *Memo) error {
	var first, rest []func() error
	for _, k := range remove {
		step := func() error { return deleteManaged(ctx, c, k, o, memo) }
		if k.gvk.Kind == "StatefulSet" {
			first = append(first, step)
		} else {
			rest = append(rest, step)
		}
	}
	for _, k := range release {
		// Releasing deletes nothing: it acts on the name's objects of any UID
		// (ExactUID narrows what is deleted only), so that a claim labelled
		// with an earlier UID that this Database used is kept unlabelled too.
		rest = append(rest, func() error { return releaseManaged(ctx, c, k, o.anyUID(), policy) })
	}
	if policy == fleetv1alpha1.DeletionPolicyRetain {
		// Certificates are machinery, not data: they hold private keys and a
		// Database created again gets its own (releaseManaged skips them).
		rest = append(rest, func() error { return deleteTopologySecrets(ctx, c, o, memo) })
	}
	errs := append(runAll(first), runAll(rest)...)
	return multierror.Append(nil, errs...).ErrorOrNil()
}

// nothingLeft lists every kind at once: done when none has an object of
// the Database left.
func nothingLeft(ctx context.Context, c client.Client, o Owner, kinds []managedKind) (bool, error) {
	left := make([]int, len(kinds))
	steps := make([]func() error, len(kinds))
	for i, k := range kinds {
		steps[i] = func() error {
			objs, err := listManaged(ctx, c, k, o)
			left[i] = len(objs)
			return err
		}
	}
	if err := errors.Join(runAll(steps)...); err != nil {
		return false, fmt.Errorf("teardown %s/%s: %w", o.Namespace, o.Name, err)
	}
	for _, n := range left {
		if n > 0 {
			return false, nil
		}
	}
	return true, nil
}

// deleteManaged deletes the objects of kind k labelled for the Database.
func deleteManaged(ctx context.Context, c client.Client, k managedKind, o Owner, memo *Memo) error {
	objs, err := listManaged(ctx, c, k, o)
	if err != nil {
		return err
	}
	var errs *multierror.Error
	for _, obj := range objs {
		if obj.GetDeletionTimestamp() != nil || memo.deleteSent(obj.GetUID()) {
			continue // already going; deleting again would only be a write
		}
		err := c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			errs = multierror.Append(errs, fmt.Errorf("deleting %s: %w", k.describe(obj), err))
			continue
		}
		memo.markDeleted(obj.GetUID())
	}
	return errs.ErrorOrNil()
}

// releaseManaged strips fleetdb's labels from the objects of kind k labelled
// for the Database, so that fleetdb neither finds nor claims them again.
func releaseManaged(ctx context.Context, c client.Client, k managedKind, o Owner, policy fleetv1alpha1.DeletionPolicy) error {
	objs, err := listManaged(ctx, c, k, o)
	if err != nil {
		return err
	}
	var errs *multierror.Error
	for _, obj := range objs {
		if policy == fleetv1alpha1.DeletionPolicyRetain && isTopologySecret(obj, o.Name) {
			continue // deleted instead (deleteTopologySecrets); Orphan keeps them too
		}
		if err := patchLabelsAway(ctx, c, obj); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("%s: %w", k.describe(obj), err))
		}
	}
	return errs.ErrorOrNil()
}

// runAll runs steps at once and returns their errors.
func runAll(steps []func() error) []error {
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	for i, step := range steps {
		wg.Go(func() { errs[i] = step() })
	}
	wg.Wait()
	return errs
}

// RotationUnderWay returns the credentials Secret of o's Database in the
// member when it shows a rotation under way (nil: none): only then may
// rotation Jobs exist, so a teardown reads Jobs only then (at rest, no Job
// is read).
func RotationUnderWay(ctx context.Context, c client.Reader, o Owner) (*corev1.Secret, error) {
	secrets, err := listManaged(ctx, c, managedKind{corev1.SchemeGroupVersion.WithKind("Secret"),
		func() client.ObjectList { return &corev1.SecretList{} }}, o)
	if err != nil {
		return nil, err
	}
	for _, obj := range secrets {
		if s, ok := obj.(*corev1.Secret); ok && InRotation(s.Data) {
			return s, nil
		}
	}
	return nil, nil
}
