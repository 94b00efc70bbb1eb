package memberjob

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Spec describes one kind of Job the hub runs in a member (a Database's
// rotation, restore, final backup, or a DatabaseBackup's backup): how its
// Jobs are found, what the hub renders for an attempt, and the backoff
// between failed attempts. The machine is Observe (what the member has),
// Start (create an attempt) and Remove (clean up); the feature decides
// what a Phase means for it (hold, retry, give up).
type Spec struct {
	// What names the kind in messages, logs and errors ("restore").
	What string
	// Namespace and Labels select the kind's Jobs; only those carrying
	// HubID (Own) are listed.
	Namespace string
	Labels    map[string]string
	HubID     string
	// AttemptKey is the annotation holding a Job's attempt number.
	AttemptKey string
	// Render renders the Job the hub runs as the given attempt. Its name
	// is the only name that attempt may have, and its pod the only pod a
	// Job of that attempt may run (SamePod).
	Render func(attempt int) (*batchv1.Job, error)
	// RenderFor, when set, renders what the hub runs for the attempt an
	// existing Job claims to be, where Render's Job depends on more than the
	// attempt (the final backup's id, read from the Job). An error: the Job
	// is none of the hub's (ignored).
	RenderFor func(j *batchv1.Job) (*batchv1.Job, error)
	// Base and Limit bound the doubling backoff after a failed attempt
	// (Backoff); both zero: a failed attempt is never retried by the machine.
	Base, Limit time.Duration
	// Cluster is the member the Jobs run in, and Ledger the hub's record
	// of the Jobs it created (nil: none kept; only SamePod trusts, and
	// Remove deletes what SamePod trusts).
	Cluster string
	Ledger  *Ledger
}

// Phase is where the kind's latest attempt stands in a member.
type Phase int

const (
	// PhaseNone is no Job of the kind; Next is the first attempt.
	PhaseNone Phase = iota
	// PhaseRunning is the latest attempt running: it neither succeeded nor failed yet.
	PhaseRunning
	// PhaseSucceeded is the latest attempt completed.
	PhaseSucceeded
	// PhaseFailed is the latest attempt failed (FailedAt, Why); Next may start
	// once Wait is over.
	PhaseFailed
	// PhaseUntrusted is a Job sitting at the hub's name for an attempt of
	// the kind that the hub did not create: it runs neither the pod the hub
	// renders for it now nor one the ledger holds for that name. Its result
	// is never taken, and the machine never deletes it: the user does, and
	// the hub runs its own.
	PhaseUntrusted
)

// Status is what Observe or Start found.
type Status struct {
	Phase Phase
	// Job is the latest attempt (PhaseUntrusted: the Job not trusted).
	Job *batchv1.Job
	// Jobs are the trusted Jobs of the kind, oldest attempt first.
	Jobs []*batchv1.Job
	// Attempt is Job's attempt; Next the attempt to start next.
	Attempt, Next int
	// FailedAt and Why: when and why the latest attempt failed (PhaseFailed).
	FailedAt time.Time
	Why      string
	// Wait is how long the backoff still holds the next attempt (PhaseFailed).
	Wait time.Duration
}

// Trusted reports whether j is a Job of the kind the hub runs: at the name
// of its attempt, running the pod the hub renders for that attempt now
// (SamePod) or, when the spec changed since, the pod the hub recorded in its
// ledger when it created the Job at that name (its own Job of an earlier spec).
func (s *Spec) Trusted(ctx context.Context, j *batchv1.Job) (bool, error) {
	atName, trusted, err := s.check(ctx, j)
	return atName && trusted, err
}

// check says whether j sits at the hub's name for the attempt it claims, and
// whether it is trusted there (Trusted).
func (s *Spec) check(ctx context.Context, j *batchv1.Job) (atName, trusted bool, err error) {
	want, err := s.renderFor(j)
	if err != nil || j.Name != want.Name {
		return false, false, nil
	}
	if SamePod(j, want) {
		return true, true, nil
	}
	held, err := s.Ledger.Holds(ctx, s.HubID, s.Cluster, j)
	return true, held, err
}

// renderFor is what the hub renders for the attempt j claims to be.
func (s *Spec) renderFor(j *batchv1.Job) (*batchv1.Job, error) {
	if s.RenderFor != nil {
		return s.RenderFor(j)
	}
	return s.Render(AttemptOf(j, s.AttemptKey))
}

// Observe lists the kind's Jobs (read live) and reports the latest trusted
// attempt (a trusted Job of an earlier spec included: it is waited for, its
// result taken, and the next attempt rendered from the spec of now). A Job
// at a name the hub never gives is ignored (nor deleted); a Job at the hub's
// name that is not trusted makes the kind PhaseUntrusted.
func (s *Spec) Observe(ctx context.Context, live client.Reader) (Status, error) {
	jobs, err := List(ctx, live, s.Namespace, s.Labels, s.HubID, s.AttemptKey, s.What)
	if err != nil {
		return Status{}, err
	}
	st := Status{Next: 1}
	for _, j := range jobs {
		atName, trusted, err := s.check(ctx, j)
		switch {
		case err != nil:
			return Status{}, err
		case !atName:
			continue
		case !trusted:
			return Status{Phase: PhaseUntrusted, Job: j, Attempt: AttemptOf(j, s.AttemptKey), Next: 1}, nil
		}
		st.Jobs = append(st.Jobs, j)
	}
	if len(st.Jobs) == 0 {
		return st, nil
	}
	return s.status(st.Jobs[len(st.Jobs)-1], st.Jobs), nil
}

// status is the Status of latest, the newest of jobs.
func (s *Spec) status(latest *batchv1.Job, jobs []*batchv1.Job) Status {
	st := Status{Phase: PhaseRunning, Job: latest, Jobs: jobs, Attempt: AttemptOf(latest, s.AttemptKey)}
	st.Next = st.Attempt + 1
	if Succeeded(latest) {
		st.Phase = PhaseSucceeded
		return st
	}
	if failed, at, why := Failed(latest); failed {
		st.Phase, st.FailedAt, st.Why = PhaseFailed, at, why
		if s.Base > 0 {
			st.Wait = max(0, time.Until(at.Add(Backoff(st.Attempt, s.Base, s.Limit))))
		}
	}
	return st
}

// Start creates the given attempt, as rendered (its labels carry the hub
// identity), after recording it in the ledger. A Job already at that name
// counts only when it is trusted (PhaseRunning or what it reached):
// otherwise PhaseUntrusted, and it is left alone.
func (s *Spec) Start(ctx context.Context, c client.Client, live client.Reader, attempt int) (Status, error) {
	job, err := s.Render(attempt)
	if err != nil {
		return Status{}, fmt.Errorf("rendering the %s job: %w", s.What, err)
	}
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	if s.HubID != "" {
		job.Labels[fleetv1alpha1.LabelHubID] = s.HubID
	}
	if err := s.Ledger.Record(ctx, s.HubID, s.Cluster, job); err != nil {
		return Status{}, fmt.Errorf("recording the %s job: %w", s.What, err)
	}
	err = c.Create(ctx, job, client.FieldOwner(fleetv1alpha1.FieldManager))
	switch {
	case err == nil:
		ctrl.LoggerFrom(ctx).Info("started a "+s.What+" job", "job", job.Name, "attempt", attempt)
		return Status{Phase: PhaseRunning, Job: job, Attempt: attempt, Next: attempt + 1}, nil
	case !apierrors.IsAlreadyExists(err):
		return Status{}, fmt.Errorf("creating the %s job: %w", s.What, err)
	}
	var cur batchv1.Job
	if err := live.Get(ctx, client.ObjectKeyFromObject(job), &cur); err != nil {
		return Status{}, fmt.Errorf("reading the %s job: %w", s.What, err)
	}
	trusted, err := s.Trusted(ctx, &cur)
	switch {
	case err != nil:
		return Status{}, err
	case !Own(&cur, s.HubID) || AttemptOf(&cur, s.AttemptKey) != attempt || !trusted:
		return Status{Phase: PhaseUntrusted, Job: &cur, Attempt: attempt, Next: attempt}, nil
	}
	return s.status(&cur, []*batchv1.Job{&cur}), nil
}

// UntrustedMessage says which Job is not trusted and what the user can do.
func (s *Spec) UntrustedMessage(j *batchv1.Job) string {
	return "Job " + j.Name + " in the member carries this " + s.What + "'s name or labels but is not a " + s.What +
		" Job the hub created (its pod differs): not trusted; delete it and the hub runs its own"
}

// Remove deletes those of jobs the hub created, and their pods (Ledger.Remove;
// without a ledger, the trusted ones).
func (s *Spec) Remove(ctx context.Context, c client.Client, jobs ...*batchv1.Job) error {
	return s.Ledger.Remove(ctx, c, s.HubID, s.Cluster, s.What, func(j *batchv1.Job) (bool, error) { return s.Trusted(ctx, j) }, jobs...)
}
