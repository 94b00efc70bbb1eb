package database

import (
	"context"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/dbstatus"
	"github.com/fleetdb/fleetdb/hub/internal/hubsecret"
)

// reconcileCredentials puts the finalizer on before anything reaches a
// member, and ensures the hub credentials Secret at the same time (it is
// owned by the Database and collected with it), to keep a new Database's
// first fan-out one hub round trip away. A Secret that belongs to someone
// else, or lost credentials no member can restore, stall the Database.
func (r *databaseReconciler) reconcileCredentials(ctx context.Context, s *databaseScope) (ctrl.Result, error) {
	if r.hubSecrets != nil {
		// Secret access in the Database's namespace before any Secret call
		// there (the hub has none but where it binds it: hubsecret/access.go).
		if err := r.hubSecrets.Ensure(ctx, s.db.Namespace); err != nil {
			return ctrl.Result{}, err
		}
	}
	creds, absent, err := r.finalizerAndCredentials(ctx, s.db)
	var foreign hubsecret.ForeignCredentialsError
	var lost hubsecret.LostCredentialsError
	var waiting errWaitingForCredentials
	switch {
	case errors.As(err, &waiting):
		// Not terminal: a member that may hold the password comes back.
		st := dbstatus.Waiting(s.db, fleetv1alpha1.ReasonWaitingForCredentials, err.Error())
		s.status = &st
		return ctrl.Result{RequeueAfter: credentialsWaitRetry}, errStopPhases
	case errors.As(err, &lost):
		return ctrl.Result{}, s.stall(fleetv1alpha1.ReasonCredentialsLost, err)
	case errors.As(err, &foreign):
		return ctrl.Result{}, s.stall(fleetv1alpha1.ReasonInvalidSpec, err)
	case err != nil:
		return ctrl.Result{}, err
	}
	s.credentials, s.absentSecrets = creds, absent
	return ctrl.Result{}, nil
}

// finalizerAndCredentials adds the teardown finalizer if it is missing and
// ensures the hub credentials Secret, both at once; it returns the
// credentials and, when they were looked for in the members, the members
// found without the Secret.
func (r *databaseReconciler) finalizerAndCredentials(ctx context.Context, db *fleetv1alpha1.Database) (map[string][]byte, *absentSecrets, error) {
	var absent *absentSecrets
	ensure := func(db *fleetv1alpha1.Database) (map[string][]byte, error) {
		return hubsecret.EnsureCredentials(ctx, r.hub, r.live, db, func() (map[string][]byte, error) {
			data, a, err := r.credentialsFromMembers(ctx, db)
			absent = a
			return data, err
		})
	}
	if controllerutil.ContainsFinalizer(db, fleetv1alpha1.TeardownFinalizer) {
		creds, err := ensure(db)
		return creds, absent, err
	}
	var (
		creds   map[string][]byte
		credErr error
		wg      sync.WaitGroup
	)
	snapshot := db.DeepCopy() // the finalizer patch rewrites db meanwhile
	wg.Go(func() { creds, credErr = ensure(snapshot) })
	finErr := r.addFinalizer(ctx, db)
	wg.Wait()
	if finErr != nil {
		return nil, nil, fmt.Errorf("adding finalizer: %w", finErr)
	}
	return creds, absent, credErr
}

// addFinalizer adds the teardown finalizer with an optimistic-lock patch (the
// list is replaced as a whole, so it must be the current one). A conflict
// usually means the cache has not seen an earlier reconcile's writes yet: the
// Database is read live, and patched again only if it still lacks the finalizer.
func (r *databaseReconciler) addFinalizer(ctx context.Context, db *fleetv1alpha1.Database) error {
	for attempt := 0; ; attempt++ {
		patch := client.MergeFromWithOptions(db.DeepCopy(), client.MergeFromWithOptimisticLock{})
		recordBackend(db)
		controllerutil.AddFinalizer(db, fleetv1alpha1.TeardownFinalizer)
		err := r.hub.Patch(ctx, db, patch)
		if !apierrors.IsConflict(err) || attempt > 0 {
			return err
		}
		fresh := &fleetv1alpha1.Database{}
		if err := r.live.Get(ctx, client.ObjectKeyFromObject(db), fresh); err != nil {
			return err
		}
		*db = *fresh
		if controllerutil.ContainsFinalizer(db, fleetv1alpha1.TeardownFinalizer) {
			return nil
		}
		if !db.DeletionTimestamp.IsZero() {
			return fmt.Errorf("the Database is being deleted")
		}
	}
}
