package database

import (
	"context"
	"errors"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/hubsecret"
	"github.com/fleetdb/fleetdb/internal/pki"
)

// needsInstanceTLS reports a Database whose members run PostgreSQL on the
// StatefulSet backend: its instances serve TLS with a certificate of the
// Database's instance CA, which the rotation Job verifies before it sends
// ALTER ROLE (issue 42, item 6). On the CloudNativePG backend the operator
// serves TLS and changes the role itself; mysql is left as it was (see
// docs/security.md).
func needsInstanceTLS(db *fleetv1alpha1.Database) bool {
	return db.Spec.Engine == fleetv1alpha1.EnginePostgres && db.EffectiveBackend() == fleetv1alpha1.BackendStatefulSet
}

// reconcileInstanceTLS keeps the instance PKI of a Database that needs it
// (hubsecret.EnsureInstancePKI: the CA and its key in a hub Secret only)
// and puts what the members get (the CA certificate, the server
// certificate and key) into the plan. A renewed certificate changes the
// plan, so every member is rendered again (and its pods restart to serve
// it: member.Render's config hash). The reconcile comes back when the
// certificate is due for renewal.
func (r *databaseReconciler) reconcileInstanceTLS(ctx context.Context, s *databaseScope) (ctrl.Result, error) {
	s.instanceTLS = nil
	if !needsInstanceTLS(s.db) {
		return ctrl.Result{}, nil
	}
	set, err := hubsecret.EnsureInstancePKI(ctx, r.hub, r.live, s.db, r.now())
	var broken pki.Error
	switch {
	case errors.As(err, &broken):
		return ctrl.Result{}, s.stall(fleetv1alpha1.ReasonInstanceCertificates, err)
	case err != nil:
		return ctrl.Result{}, err
	}
	if len(set.Issued) > 0 {
		r.recorder.Eventf(s.db, nil, corev1.EventTypeNormal, "CertificatesIssued", "InstanceTLS",
			"issued the instances' TLS certificates from the Database's CA: %s", strings.Join(set.Issued, ", "))
	}
	certs := set.Certs
	s.instanceTLS = &certs
	return ctrl.Result{RequeueAfter: untilRenewal(set.Renew, r.now())}, nil
}
