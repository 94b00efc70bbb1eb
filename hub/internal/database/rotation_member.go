package database

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/memberjob"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
	"github.com/fleetdb/fleetdb/member"
)

// Backoff between attempts of a member's failed rotation Job: it doubles
// from rotationRetryBase up to rotationRetryMax.
const (
	rotationRetryBase = 15 * time.Second
	rotationRetryMax  = 10 * time.Minute
)

// rotationJobPoll is how often a member sync looks at a running rotation
// Job. Jobs are not watched: a watch would need the member's RBAC for Jobs
// at all times (and fail on members deployed without it), while Jobs exist
// only during a rotation; they are read live, and only then.
const rotationJobPoll = 5 * time.Second

// memberRotation is what a member sync knows about the rotation in its
// member before it applies.
type memberRotation struct {
	// creds are the credentials to render for the member (nil: the plan's).
	creds map[string][]byte
	// token and pending are the hub's rotation under way ("" / nil: none).
	token   string
	pending []byte
	// switched: the member runs on the pending password.
	switched bool
	// cnpg: the CloudNativePG backend, where writing the pending password
	// into the member Secret is the switch (CloudNativePG alters the role).
	cnpg bool
	// cnpgWaiting: the member Secret has the pending password and
	// CloudNativePG's Cluster does not report that Secret version yet.
	cnpgWaiting bool
	// held: a standby member of a PrimaryStandby Database that waits for
	// the primary member to switch first (rotationHeldMembers).
	held bool
	// secret is the member's credentials Secret as the member's API server
	// answered this sync (nil: none).
	secret *corev1.Secret
	// job is where the member's rotation Jobs of the token stand.
	job memberjob.Status
}

// prepareRotation finds out whether the member already switched to the
// pending password of the rotation under way: its Secret (read live) says so,
// or its latest rotation Job (read live) succeeded. A switched member
// gets member.SwitchedCredentials. On the CloudNativePG backend there is no
// Job: the member gets member.SwitchedCredentials at once, and CloudNativePG
// changes the role's password on the Cluster's primary when its Secret
// (bootstrap.initdb.secret, labelled cnpg.io/reload) changes; the member
// counts as switched once the Cluster reports that Secret's version
// (member.CNPGTookCredentials), not when the Secret was written.
func (r *memberSyncReconciler) prepareRotation(ctx context.Context, c client.Client, live client.Reader, cluster string, db *fleetv1alpha1.Database,
	p *plan) (*memberRotation, error) {
	mr := &memberRotation{
		token:   string(p.credentials[member.CredentialsRotationTokenKey]),
		pending: p.credentials[member.CredentialsPendingPasswordKey],
	}
	// Read live (member caches hold no Secrets), or known to be absent: the
	// credential recovery read it live a moment ago (plan.absentSecrets). The
	// apply's ownership check takes this answer instead of reading it again
	// (knownSecret).
	if !p.absentSecrets.take(cluster, time.Now()) {
		var s corev1.Secret
		switch err := live.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: member.CredentialsSecretName(db.Name)}, &s); {
		case err == nil:
			mr.secret = &s
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading the member credentials secret: %w", err)
		}
	}
	if len(mr.pending) == 0 {
		// Before the apply writes the final Secret: a failed removal is
		// retried while the member Secret still shows the rotation.
		return mr, r.removeRotationJobs(ctx, c, live, cluster, db, mr.secret)
	}
	if db.EffectiveBackend() == fleetv1alpha1.BackendCloudNativePG && p.rotationHeld[cluster] {
		mr.cnpg, mr.held = true, true
		if mr.secret != nil && bytes.Equal(mr.secret.Data[member.CredentialsPasswordKey], mr.pending) {
			// Written before the hold: never taken back (the hub does not
			// replace a password it handed out), just not counted yet.
			mr.creds = member.SwitchedCredentials(p.credentials)
		}
		return mr, nil
	}
	if db.EffectiveBackend() == fleetv1alpha1.BackendCloudNativePG {
		mr.cnpg = true
		mr.creds = member.SwitchedCredentials(p.credentials)
		mr.switched = mr.secret != nil && bytes.Equal(mr.secret.Data[member.CredentialsPasswordKey], mr.pending)
		if mr.switched {
			// The password is in the Secret; it is in PostgreSQL once
			// CloudNativePG took that version of the Secret.
			taken, err := member.CNPGTookCredentials(ctx, live, db, mr.secret)
			if err != nil {
				return nil, err
			}
			mr.switched, mr.cnpgWaiting = taken, !taken
		}
		return mr, nil
	}
	var err error
	if mr.job, err = r.rotationJobSpec(cluster, db, mr.token, nil).Observe(ctx, live); err != nil {
		return nil, err
	}
	mr.switched = mr.secret != nil && bytes.Equal(mr.secret.Data[member.CredentialsPasswordKey], mr.pending)
	if mr.job.Phase == memberjob.PhaseSucceeded {
		mr.switched = true
	}
	if mr.switched {
		mr.creds = member.SwitchedCredentials(p.credentials)
	}
	return mr, nil
}

// finishRotation runs after the apply: it reports the member's state, runs
// the rotation Job where the member Secret already carries the pending
// password, retries a failed one with backoff, and removes the Jobs once no
// rotation is under way. applied tells that this pass wrote the member
// Secret from the hub credentials. It returns when to look again.
func (r *memberSyncReconciler) finishRotation(ctx context.Context, c client.Client, live client.Reader, cluster string, db *fleetv1alpha1.Database,
	p *plan, mr *memberRotation, applied bool) (rotationReport, time.Duration, error) {
	want := p.credentials
	if mr.creds != nil {
		want = mr.creds
	}
	current := applied || (mr.secret != nil && maps.EqualFunc(mr.secret.Data, want, bytes.Equal))
	if len(mr.pending) == 0 {
		return rotationReport{Current: current}, 0, nil
	}
	rep := rotationReport{Token: mr.token, Current: current, Switched: mr.switched}
	if mr.held {
		rep.Waiting = "a standby member: waiting for the primary member to change the role's password first (this member's database gets it by replication)"
		return rep, 0, nil
	}
	if rep.Switched {
		return rep, 0, nil
	}
	if mr.cnpg && (applied || mr.cnpgWaiting) {
		// CloudNativePG's status is not watched: look again.
		rep.Waiting = "waiting for CloudNativePG to take the new credentials Secret (the Cluster's status.secretsResourceVersion)"
		return rep, rotationJobPoll, nil
	}
	if mr.cnpg {
		rep.Waiting = "waiting for the rollout to put the new password into the credentials Secret (CloudNativePG changes the role's password from it)"
		return rep, 0, nil
	}
	if !current {
		rep.Waiting = "waiting for the rollout to update the credentials Secret"
		return rep, 0, nil
	}
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, &sts); err != nil {
		if apierrors.IsNotFound(err) {
			rep.Waiting = "waiting for the StatefulSet"
			return rep, 0, nil
		}
		return rep, 0, fmt.Errorf("reading the statefulset: %w", err)
	}
	spec := r.rotationJobSpec(cluster, db, mr.token, &sts)
	st := mr.job
	switch st.Phase {
	case memberjob.PhaseUntrusted:
		// Its success would switch the member to a password nobody set: held until it is deleted.
		rep.Failed = statusmsg.Bound(spec.UntrustedMessage(st.Job))
		return rep, rotationRetryBase, nil
	case memberjob.PhaseRunning:
		rep.Waiting = "rotation Job " + st.Job.Name + " running"
		return rep, rotationJobPoll, nil
	case memberjob.PhaseFailed:
		rep.Failed = "Job " + st.Job.Name + " failed: " + st.Why
		if st.Wait > 0 {
			return rep, st.Wait, nil
		}
	}
	started, err := spec.Start(ctx, c, live, st.Next)
	switch {
	case err != nil:
		return rep, 0, err
	case started.Phase == memberjob.PhaseUntrusted:
		rep.Failed = statusmsg.Bound(spec.UntrustedMessage(started.Job))
		return rep, rotationRetryBase, nil
	}
	if rep.Failed == "" {
		rep.Waiting = "rotation Job " + started.Job.Name + " running"
	}
	return rep, rotationJobPoll, nil
}

// removeRotationJobs deletes the Database's rotation Jobs the hub created
// (and their pods) once no rotation is under way, while the member Secret
// (as cached) still shows the last one: memberjob.Spec.Remove, never a Job
// that only carries their labels. At rest it makes no call.
func (r *memberSyncReconciler) removeRotationJobs(ctx context.Context, c client.Client, live client.Reader, cluster string, db *fleetv1alpha1.Database,
	secret *corev1.Secret) error {
	if secret == nil || !member.InRotation(secret.Data) {
		return nil
	}
	var list batchv1.JobList
	if err := live.List(ctx, &list, client.InNamespace(db.Namespace),
		client.MatchingLabelsSelector{Selector: member.SelectorFor(db.Namespace, db.Name)}, client.HasLabels{fleetv1alpha1.LabelRotation}); err != nil {
		return fmt.Errorf("listing rotation jobs: %w", err)
	}
	var own []*batchv1.Job
	for i := range list.Items {
		if memberjob.Own(&list.Items[i], r.opts.HubID) {
			own = append(own, &list.Items[i])
		}
	}
	return r.rotationJobSpec(cluster, db, string(secret.Data[member.CredentialsRotationTokenKey]), nil).Remove(ctx, c, own...)
}

// teardownRotationJobs removes, before a teardown of o's Database (the
// member sync's, or the reconnect sweep's), the rotation Jobs the hub
// created for it in the member while its credentials Secret shows a
// rotation under way (member.RotationUnderWay, through c; at rest no Job is
// read): removeRotationJobs, so a Job that only carries their labels (made
// by someone else) stays. Jobs are listed through live, never a cache.
func (r *memberSyncReconciler) teardownRotationJobs(ctx context.Context, c client.Client, live client.Reader, cluster string, o member.Owner) error {
	secret, err := member.RotationUnderWay(ctx, c, o)
	if err != nil || secret == nil {
		return err
	}
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name, UID: o.UID}}
	return r.removeRotationJobs(ctx, c, live, cluster, db, secret)
}

// rotationJobSpec is the rotation Job machine of db's token in cluster;
// sts (nil to observe) owns the Job. A Job counts only when it runs the pod
// the hub renders (memberjob.SamePod): a forged Job that succeeded would
// switch the member to the pending password without it being set.
func (r *memberSyncReconciler) rotationJobSpec(cluster string, db *fleetv1alpha1.Database, token string, sts *appsv1.StatefulSet) *memberjob.Spec {
	if sts == nil {
		// The owner reference is not part of what SamePod compares.
		sts = &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name}}
	}
	return &memberjob.Spec{
		What: "rotation", Namespace: db.Namespace, Labels: member.RotationJobLabels(db, token), HubID: r.opts.HubID,
		AttemptKey: fleetv1alpha1.AnnotationRotationAttempt, Base: rotationRetryBase, Limit: rotationRetryMax, Cluster: cluster, Ledger: r.jobs,
		Render: func(attempt int) (*batchv1.Job, error) {
			return member.RotationJob(member.RotationParams{
				Database: db, Cluster: cluster, Token: token, Attempt: attempt, StatefulSet: sts, ImageRepository: r.opts.ImageRepository,
			})
		},
	}
}

// rotationBackoff is the wait after the given failed attempt.
func rotationBackoff(attempt int) time.Duration {
	return memberjob.Backoff(attempt, rotationRetryBase, rotationRetryMax)
}
