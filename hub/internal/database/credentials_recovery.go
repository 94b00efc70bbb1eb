package database

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/hubsecret"
	"github.com/fleetdb/fleetdb/internal/placement"
	"github.com/fleetdb/fleetdb/member"
)

// credentialsWaitRetry is how soon a Database that waits for a member to
// recover its credentials from looks again (a member coming back also wakes it).
const credentialsWaitRetry = 10 * time.Second

// errWaitingForCredentials is a retryable condition: the hub credentials
// Secret is missing, no member read so far holds a copy, and some member the
// Database may be on cannot be read now. A new password could lock that
// member's data out, so the hub waits instead.
type errWaitingForCredentials struct {
	name    string
	members []string
}

func (e errWaitingForCredentials) Error() string {
	return fmt.Sprintf("credentials secret %s is missing on the hub; waiting for member(s) %s, which may hold the password, "+
		"to be reachable (no new password is generated while a member may hold one)", e.name, strings.Join(e.members, ", "))
}

// recovered is what recoverCredentials found.
type recovered struct {
	data map[string][]byte
	// from is the member the data came from.
	from string
	// unreadable are members the Database may be on that could not be read.
	unreadable []string
	// readable counts the members the Database may be on that were read.
	readable int
	// ranUnreadable is set when a member the Database ran on (its status) could not be read.
	ranUnreadable bool
	// absent are the members whose API server answered NotFound for the
	// Secret, read at or after absentSince.
	absent      []string
	absentSince time.Time
}

// mustWait says whether a missing password may not be generated yet: no
// member the Database may be on could be read, or one it ran on could not.
// (A member read later that holds another password is never overwritten:
// the member apply refuses it with a Conflict.)
func (r recovered) mustWait() bool {
	return len(r.unreadable) > 0 && (r.readable == 0 || r.ranUnreadable)
}

// recoverCredentials looks for the Database's credentials in every member
// the hub is connected to (a Database recreated under the same name, or
// restored from Git, finds the password its data was initialised with), in
// the member caches (fleetdb's labelled Secrets). Only Secrets this hub wrote
// (its identity, or none: older objects) count; one of this Database's UID
// is preferred. It also reports the members the Database may be on (placed
// now or in its status) that cannot be read.
func (r *databaseReconciler) recoverCredentials(ctx context.Context, db *fleetv1alpha1.Database) (recovered, error) {
	var res recovered
	var members fleetv1alpha1.MemberClusterList
	if err := r.hub.List(ctx, &members); err != nil {
		return res, fmt.Errorf("listing member clusters: %w", err)
	}
	maybe, ran := map[string]bool{}, map[string]bool{}
	for _, name := range placement.CurrentMembers(db) {
		maybe[name], ran[name] = true, true
	}
	if placed, err := placement.Resolve(db, members.Items, placement.CurrentMembers(db)); err == nil {
		for _, name := range placed.Targets {
			maybe[name] = true
		}
	}
	registered := map[string]bool{}
	for i := range members.Items {
		registered[members.Items[i].Name] = true
	}
	names := sortedKeys(registered)
	// The members are read at once (a read may go to a member's API server,
	// see memberCredentials); the results are weighed in name order.
	secrets, oks, absent := make([]*corev1.Secret, len(names)), make([]bool, len(names)), make([]bool, len(names))
	res.absentSince = time.Now()
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { secrets[i], oks[i], absent[i] = r.memberCredentials(ctx, db, name, maybe[name]) })
	}
	wg.Wait()
	bestOwn := false
	for i, name := range names {
		s, ok := secrets[i], oks[i]
		if absent[i] {
			res.absent = append(res.absent, name)
		}
		switch {
		case !ok:
			if maybe[name] {
				res.unreadable = append(res.unreadable, name)
				res.ranUnreadable = res.ranUnreadable || ran[name]
			}
		case maybe[name]:
			res.readable++
		}
		switch {
		case s == nil:
		case res.data == nil || (!bestOwn && s.Labels[fleetv1alpha1.LabelDatabaseUID] == string(db.UID)):
			res.data = hubsecret.RecoverableCredentials(s.Data)
			res.from = name
			bestOwn = s.Labels[fleetv1alpha1.LabelDatabaseUID] == string(db.UID)
		}
	}
	return res, nil
}

// memberCredentials reads the Database's credentials Secret in one member
// (live: member caches hold no Secrets, see MemberClusterOptions); ok is
// false when the member cannot be read now. Where the Database may be placed
// (placed), a Secret a Retain teardown kept is read too, and a member that
// refuses the read (the hub's Secret role not bound in the namespace yet:
// a namespace adopted by its admins, or Secrets written before the role was
// bound per namespace) is given the access first (member.SecretAccess; a
// missing namespace holds nothing and is not created here). absent is set
// when the member's API server answered that the Secret is not there.
func (r *databaseReconciler) memberCredentials(ctx context.Context, db *fleetv1alpha1.Database, name string, placed bool) (_ *corev1.Secret, ok, absent bool) {
	cl, ok := r.readableMember(ctx, name)
	if !ok {
		return nil, false, false
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.MemberCallTimeout)
	defer cancel()
	var s corev1.Secret
	key := client.ObjectKey{Namespace: db.Namespace, Name: member.CredentialsSecretName(db.Name)}
	err := cl.GetClient().Get(cctx, key, &s)
	if apierrors.IsForbidden(err) && placed && r.secrets != nil {
		present, aerr := r.secrets.ensure(cctx, name, cl, db.Namespace, nil)
		switch {
		case apierrors.IsForbidden(aerr):
			// The member's policy refuses the hub in this namespace (not
			// labelled for fleetdb): fleetdb cannot have written a Secret there.
			return nil, true, false
		case aerr != nil:
			return nil, false, false
		case !present:
			return nil, true, false
		}
		err = cl.GetClient().Get(cctx, key, &s)
	}
	if err != nil {
		notFound := apierrors.IsNotFound(err)
		return nil, notFound, notFound
	}
	l := s.Labels
	if placed && l[fleetv1alpha1.LabelManagedBy] == "" {
		// A Secret kept by a Retain teardown lost fleetdb's labels.
		kept, ok := retainedMemberCredentials(&s)
		return kept, ok, false
	}
	if l[fleetv1alpha1.LabelDatabaseNamespace] != db.Namespace || l[fleetv1alpha1.LabelDatabaseName] != db.Name ||
		len(s.Data["username"]) == 0 || len(s.Data["password"]) == 0 {
		return nil, true, false
	}
	if hub := l[fleetv1alpha1.LabelHubID]; hub != "" && hub != r.opts.HubID {
		return nil, true, false // another hub's Database of the same name
	}
	return &s, true, false
}

// retainedMemberCredentials is the Secret a Retain teardown of an earlier
// Database of this name kept in a member (fleetdb's labels stripped, its
// deletion-policy annotation kept), or nil for any other unlabelled Secret:
// its password is the one the retained data was initialised with, so a
// re-created Database must use it.
func retainedMemberCredentials(s *corev1.Secret) (*corev1.Secret, bool) {
	_, released := s.Annotations[fleetv1alpha1.AnnotationDeletionPolicy]
	if !released || len(s.Data["username"]) == 0 || len(s.Data["password"]) == 0 {
		return nil, true
	}
	return s, true
}

// credentialsFromMembers is hubsecret.EnsureCredentials' recovery step: the copy a
// member holds (with an Event), errWaitingForCredentials while a member that
// may hold one cannot be read, or nil when no member holds any. absent are
// the members found without the Secret (for the member syncs: absentSecrets).
func (r *databaseReconciler) credentialsFromMembers(ctx context.Context, db *fleetv1alpha1.Database) (_ map[string][]byte, absent *absentSecrets, _ error) {
	res, err := r.recoverCredentials(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	absent = newAbsentSecrets(res.absentSince, res.absent)
	switch {
	case res.data != nil:
		r.recorder.Eventf(db, nil, corev1.EventTypeWarning, "CredentialsRecovered", "Credentials",
			"the hub credentials Secret was missing; restored it from member %s", res.from)
		return res.data, absent, nil
	case res.mustWait():
		return nil, nil, errWaitingForCredentials{name: db.Namespace + "/" + member.CredentialsSecretName(db.Name), members: res.unreadable}
	}
	return nil, absent, nil
}
