package database

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/hubsecret"
	"github.com/fleetdb/fleetdb/hub/internal/tombstones"
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
	// refused are the members holding a copy no hub record vouches for:
	// not taken (a new password is generated if nothing else is found, and
	// those members show Conflict on their copy, which is never replaced).
	refused []string
}

// mustWait says whether a missing password may not be generated yet: no
// member the Database may be on could be read, or one it ran on could not.
// (A member read later that holds another password is never overwritten:
// the member apply refuses it with a Conflict.)
func (r recovered) mustWait() bool {
	return len(r.unreadable) > 0 && (r.readable == 0 || r.ranUnreadable)
}

// recoverySources is what may vouch for a member's copy of the
// Database's credentials: the hub's own records, never the member's word.
type recoverySources struct {
	// current are the members the Database is placed on now (admitted by
	// their tenancy) or that its status names: a copy of this Database's
	// own UID there is its own (its hub Secret was lost).
	current map[string]bool
	// retained is the hub's record of an earlier Database of this
	// namespace/name torn down with Retain, by this hub, in this very hub
	// namespace (same Namespace UID); nil if none applies.
	retained *tombstones.Retained
	// skipped are the hub's tombstones of earlier Databases of this
	// namespace/name (in this hub Namespace) whose teardown it skipped in
	// some members: a later Database of the name adopts what it finds
	// there (see docs/data-safety.md, the reconnect sweep).
	skipped []tombstones.Tombstone
	// skippedUIDs are their Database UIDs, in the same order.
	skippedUIDs []types.UID
	// told is the UID AnnotationAdoptCredentials names, if any.
	told types.UID
}

// skippedIn says whether a tombstone of uid names member.
func (src recoverySources) skippedIn(uid types.UID, member string) bool {
	for i, ts := range src.skipped {
		if uid != "" && src.skippedUIDs[i] == uid && slices.Contains(ts.Members, member) {
			return true
		}
	}
	return false
}

// accepts says whether the copy s, read in member, may restore the
// Database's credentials, and whether it is the Database's own.
func (src recoverySources) accepts(s *corev1.Secret, db *fleetv1alpha1.Database, member string) (ok, own bool) {
	l := s.Labels
	if l[fleetv1alpha1.LabelManagedBy] == "" {
		// Released by a Retain teardown (fleetdb's labels stripped, its
		// deletion-policy annotation kept; the UID in AnnotationReleasedUID
		// since that annotation exists).
		if _, released := s.Annotations[fleetv1alpha1.AnnotationDeletionPolicy]; !released {
			return false, false
		}
		from := types.UID(s.Annotations[fleetv1alpha1.AnnotationReleasedUID])
		switch {
		case src.retained != nil && slices.Contains(src.retained.Members, member) && (from == "" || from == src.retained.UID):
			return true, false
		case from != "" && src.current[member] && (from == db.UID || from == src.told):
			return true, from == db.UID
		case src.skippedIn(from, member):
			return true, false
		}
		return false, false
	}
	uid := types.UID(l[fleetv1alpha1.LabelDatabaseUID])
	switch {
	case uid == db.UID && src.current[member]:
		return true, true
	case src.retained != nil && slices.Contains(src.retained.Members, member) && (uid == src.retained.UID || uid == ""):
		// The retained Secret, relabelled by the member's admins.
		return true, false
	case src.told != "" && uid == src.told && src.current[member]:
		return true, false
	case src.skippedIn(uid, member):
		return true, false
	}
	return false, false
}

// recoverCredentials looks for the Database's credentials in the members
// the hub's own records point at: those it is placed on (admitted by their
// tenancy) or that its status names, and those the hub's retained record of
// an earlier Database of this namespace/name names (see recoverySources).
// A copy is taken only when those records vouch for it (accepts): its own
// UID, the retained record's, or the one AnnotationAdoptCredentials names.
// Only Secrets this hub wrote (its identity, or none: older objects) count;
// one of this Database's UID is preferred. It also reports the members the
// Database may be on (placed now or in its status) that cannot be read.
func (r *databaseReconciler) recoverCredentials(ctx context.Context, db *fleetv1alpha1.Database) (recovered, error) {
	src, ran, registered, err := r.recoverySourcesOf(ctx, db)
	if err != nil {
		return recovered{}, err
	}
	names := src.membersToRead(registered)
	// The members are read at once (a read may go to a member's API server,
	// see memberCredentials); the results are weighed in name order.
	reads := make([]memberRead, len(names))
	absentSince := time.Now()
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			reads[i].secret, reads[i].ok, reads[i].absent = r.memberCredentials(ctx, db, name)
		})
	}
	wg.Wait()
	res := src.weigh(db, names, reads, ran)
	res.absentSince = absentSince
	return res, nil
}

// memberRead is what memberCredentials found in one member.
type memberRead struct {
	secret     *corev1.Secret
	ok, absent bool
}

// recoverySourcesOf gathers what may vouch for a member's copy of db's
// credentials (recoverySources), the members db ran on (placed now or in its
// status) and the registered members.
func (r *databaseReconciler) recoverySourcesOf(ctx context.Context, db *fleetv1alpha1.Database) (
	src recoverySources, ran, registered map[string]bool, err error) {
	var members fleetv1alpha1.MemberClusterList
	if err := r.hub.List(ctx, &members); err != nil {
		return src, nil, nil, fmt.Errorf("listing member clusters: %w", err)
	}
	admitted, _, err := r.admitMembers(ctx, db, members.Items)
	if err != nil {
		return src, nil, nil, err
	}
	src = recoverySources{current: map[string]bool{}, told: types.UID(db.Annotations[fleetv1alpha1.AnnotationAdoptCredentials])}
	ran = map[string]bool{}
	for _, name := range placement.CurrentMembers(db) {
		src.current[name], ran[name] = true, true
	}
	if placed, err := placement.Resolve(db, admitted, placement.CurrentMembers(db)); err == nil {
		for _, name := range placed.Targets {
			src.current[name] = true
		}
	}
	if src.retained, src.skipped, src.skippedUIDs, err = r.hubRecords(ctx, db); err != nil {
		return src, nil, nil, err
	}
	registered = map[string]bool{}
	for i := range members.Items {
		registered[members.Items[i].Name] = true
	}
	return src, ran, registered, nil
}

// membersToRead are the registered members the sources point at, sorted:
// the current ones and those the retained record and the tombstones name.
func (src recoverySources) membersToRead(registered map[string]bool) []string {
	read := maps.Clone(src.current)
	if src.retained != nil {
		for _, name := range src.retained.Members {
			read[name] = true
		}
	}
	for _, ts := range src.skipped {
		for _, name := range ts.Members {
			read[name] = true
		}
	}
	var names []string
	for _, name := range sortedKeys(read) {
		if registered[name] {
			names = append(names, name)
		}
	}
	return names
}

// weigh folds the members' reads, in name order, into what was recovered:
// the first vouched-for copy, or the Database's own one where there is one;
// the members that could not be read or hold an unvouched copy.
func (src recoverySources) weigh(db *fleetv1alpha1.Database, names []string, reads []memberRead, ran map[string]bool) recovered {
	var res recovered
	bestOwn := false
	for i, name := range names {
		s, ok := reads[i].secret, reads[i].ok
		if reads[i].absent {
			res.absent = append(res.absent, name)
		}
		switch {
		case !ok:
			if src.current[name] {
				res.unreadable = append(res.unreadable, name)
				res.ranUnreadable = res.ranUnreadable || ran[name]
			}
		case src.current[name]:
			res.readable++
		}
		if s == nil {
			continue
		}
		take, own := src.accepts(s, db, name)
		if !take {
			res.refused = append(res.refused, name)
			continue
		}
		if res.data == nil || (!bestOwn && own) {
			res.data = hubsecret.RecoverableCredentials(s.Data)
			res.from, bestOwn = name, own
		}
	}
	return res
}

// hubRecords are the hub's records of earlier Databases of db's
// namespace/name that db may adopt the credentials of: the Retain record
// (written by this hub, its identity, for another UID, in the same hub
// Namespace: a namespace deleted and created again is a new tenant's) and
// the tombstones of skipped teardowns (in the same hub Namespace, or
// written before tombstones recorded it).
func (r *databaseReconciler) hubRecords(ctx context.Context, db *fleetv1alpha1.Database) (
	retained *tombstones.Retained, skipped []tombstones.Tombstone, skippedUIDs []types.UID, err error) {
	return hubRecordsOf(ctx, r.hub, r.tombstones, r.opts.HubID, db)
}

// hubRecordsOf is hubRecords for any reader of the hub (the member syncs
// ask it too, see claimsGuard).
func hubRecordsOf(ctx context.Context, hub client.Reader, store *tombstones.Store, hubID string, db *fleetv1alpha1.Database) (
	retained *tombstones.Retained, skipped []tombstones.Tombstone, skippedUIDs []types.UID, err error) {
	if store == nil {
		return nil, nil, nil, nil
	}
	var ns corev1.Namespace
	if err := hub.Get(ctx, client.ObjectKey{Name: db.Namespace}, &ns); err != nil {
		return nil, nil, nil, fmt.Errorf("reading namespace %s: %w", db.Namespace, err)
	}
	rec, stones, err := store.For(ctx, db.Namespace, db.Name)
	if err != nil {
		return nil, nil, nil, err
	}
	if rec != nil && rec.UID != db.UID && rec.NamespaceUID == ns.UID && rec.HubID == hubID {
		retained = rec
	}
	for _, uid := range slices.Sorted(maps.Keys(stones)) {
		ts := stones[uid]
		if uid != db.UID && (ts.NamespaceUID == "" || ts.NamespaceUID == ns.UID) {
			skipped, skippedUIDs = append(skipped, ts), append(skippedUIDs, uid)
		}
	}
	return retained, skipped, skippedUIDs, nil
}

// memberCredentials reads the Database's credentials Secret in one member
// (live: member caches hold no Secrets, see MemberClusterOptions); ok is
// false when the member cannot be read now. A member that refuses the read
// (the hub's Secret role not bound in the namespace yet: a namespace adopted
// by its admins, or Secrets written before the role was bound per
// namespace) is given the access first (member.SecretAccess; a missing
// namespace holds nothing and is not created here). absent is set when the
// member's API server answered that the Secret is not there. The Secret
// returned is fleetdb's for this Database name and this hub (or released by
// a teardown) with a password; whether it may be taken is recoverCredentials'
// call.
func (r *databaseReconciler) memberCredentials(ctx context.Context, db *fleetv1alpha1.Database, name string) (_ *corev1.Secret, ok, absent bool) {
	cl, ok := r.readableMember(ctx, name)
	if !ok {
		return nil, false, false
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.MemberCallTimeout)
	defer cancel()
	var s corev1.Secret
	key := client.ObjectKey{Namespace: db.Namespace, Name: member.CredentialsSecretName(db.Name)}
	err := cl.GetClient().Get(cctx, key, &s)
	if apierrors.IsForbidden(err) && r.secrets != nil {
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
	if len(s.Data["username"]) == 0 || len(s.Data["password"]) == 0 {
		return nil, true, false
	}
	l := s.Labels
	if l[fleetv1alpha1.LabelManagedBy] == "" {
		return &s, true, false // released by a teardown, or anyone's: accepts decides
	}
	if l[fleetv1alpha1.LabelDatabaseNamespace] != db.Namespace || l[fleetv1alpha1.LabelDatabaseName] != db.Name {
		return nil, true, false
	}
	if hub := l[fleetv1alpha1.LabelHubID]; hub != "" && hub != r.opts.HubID {
		return nil, true, false // another hub's Database of the same name
	}
	return &s, true, false
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
	case len(res.refused) > 0:
		r.recorder.Eventf(db, nil, corev1.EventTypeWarning, "CredentialsNotAdopted", "Credentials",
			"member(s) %s hold a credentials Secret of this name that no record of this hub ties to this Database "+
				"(another Database UID, no Retain record of it in this hub namespace, and no %s annotation naming it): "+
				"not taken; those members show Conflict and their Secret is never replaced. To take it over (and the data "+
				"it guards), set the annotation %s=<the earlier Database's UID> and delete the hub Secret %s",
			strings.Join(res.refused, ", "), fleetv1alpha1.AnnotationAdoptCredentials, fleetv1alpha1.AnnotationAdoptCredentials,
			member.CredentialsSecretName(db.Name))
	}
	return nil, absent, nil
}
