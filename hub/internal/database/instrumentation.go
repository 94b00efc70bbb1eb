package database

import (
	"context"
	"errors"
	"maps"
	"net"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// Outcomes: the telemetry.AttrOutcome of spans and the outcome label of
// fleetdb_member_sync_duration_seconds.
const (
	// A Database reconcile: done, done but looks again later (a teardown
	// waiting on an unreachable member), failed and retried, or failed
	// for good until something changes.
	outcomeOK       = telemetry.OutcomeOK
	outcomeRequeue  = telemetry.OutcomeRequeue
	outcomeError    = telemetry.OutcomeError
	outcomeTerminal = telemetry.OutcomeTerminal

	// A member sync: applied the current generation and observed it;
	// observed only (rollout hold, or the plan is behind the Database);
	// removed everything; removal still in progress; refused because of an
	// object fleetdb does not own; member unreachable; failed (outcomeError,
	// see the reason); nothing to do (the plan is stale or the Database gone,
	// not counted in the histogram).
	outcomeSynced          = "synced"
	outcomeObserved        = "observed"
	outcomeTornDown        = "torn_down"
	outcomeTeardownWaiting = "teardown_waiting"
	outcomeConflict        = "conflict"
	outcomeUnreachable     = "unreachable"
	outcomeSkipped         = "skipped"
)

// Reasons of fleetdb_member_sync_errors_total.
const (
	errReasonConflict    = "conflict"
	errReasonUnreachable = "unreachable"
	errReasonApply       = "apply"
	errReasonObserve     = "observe"
	errReasonTeardown    = "teardown"
	// errReasonHub: the hub's own read of the Database failed.
	errReasonHub = "hub"
)

func (r memberRole) String() string {
	switch r {
	case roleApply:
		return "apply"
	case roleHold:
		return "hold"
	case roleTeardown:
		return "teardown"
	}
	return "none"
}

// startReconcileSpan starts the span of one hub Database reconcile, a root:
// what triggered it (a user's edit, a member's report) is not known here.
// The ids go into the context's logger. Without a tracer (tracing off) it
// does nothing.
func (r *databaseReconciler) startReconcileSpan(ctx context.Context, key types.NamespacedName) (context.Context, trace.Span) {
	if r.tracer == nil {
		return ctx, telemetry.NoopSpan
	}
	ctx, span := r.tracer.Start(ctx, telemetry.SpanDatabaseReconcile, trace.WithNewRoot())
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.AttrDatabaseNamespace.String(key.Namespace),
			telemetry.AttrDatabaseName.String(key.Name),
			telemetry.AttrReconcileID.String(string(controller.ReconcileIDFromContext(ctx))),
		)
	}
	return telemetry.WithSpanLogger(ctx, span), span
}

// endReconcileSpan records how the reconcile ended and ends its span.
func endReconcileSpan(span trace.Span, res ctrl.Result, err error) {
	telemetry.EndReconcileSpan(span, res, err)
}

// publish hands a plan to the member syncs with the traceparent of the
// change it belongs to. A plan for a new generation, a new placement or the
// start of a deletion starts a change: the current reconcile's span is its
// trace, the parent of the member syncs that carry it out and the
// traceparent the member objects they write carry. Later reconciles of the
// same change (woken by member reports, requeues) keep that traceparent and
// link their span to it, so a change stays one trace however many passes
// it takes.
func (r *databaseReconciler) publish(ctx context.Context, key types.NamespacedName, p *plan) {
	span := trace.SpanFromContext(ctx)
	change := telemetry.ChangeNew
	if prev := r.state.plan(key); prev != nil && prev.traceparent != "" && sameChange(prev, p) {
		p.traceparent, change = prev.traceparent, telemetry.ChangeContinued
	} else {
		p.traceparent = telemetry.TraceparentOf(span.SpanContext())
	}
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.AttrDatabaseUID.String(string(p.uid)),
			telemetry.AttrDatabaseGeneration.Int64(p.generation),
			telemetry.AttrMembersPlanned.Int(len(p.targets)),
			telemetry.AttrMembersTeardown.Int(len(p.teardown)),
			telemetry.AttrChange.String(change),
		)
		if change == telemetry.ChangeContinued {
			span.AddLink(trace.Link{SpanContext: telemetry.SpanContextOf(p.traceparent)})
		}
	}
	r.state.setPlan(key, p)
}

// sameChange: same Database, generation and placement; a deletion plan (no
// targets at all) is another change than any placement.
func sameChange(a, b *plan) bool {
	return a.uid == b.uid && a.generation == b.generation &&
		(a.targets == nil) == (b.targets == nil) && maps.Equal(a.targets, b.targets)
}

// statusComputed notes the phase on the reconcile's span, and logs a status
// write: at Info when the phase changes, else at V(1).
func statusComputed(ctx context.Context, db *fleetv1alpha1.Database, prev fleetv1alpha1.Phase, st fleetv1alpha1.DatabaseStatus, written bool) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(telemetry.AttrDatabasePhase.String(string(st.Phase)), telemetry.AttrDatabaseGeneration.Int64(db.Generation))
	}
	if !written {
		return
	}
	log := ctrl.LoggerFrom(ctx)
	if prev == st.Phase {
		log = log.V(1)
	}
	log.Info("Database status updated", "phase", st.Phase, "previousPhase", prev,
		"readyClusters", st.ReadyClusters, "targetClusters", st.TargetClusters, "generation", db.Generation)
}

// memberSync instruments one member sync: its span, the trace ids in its
// logger, its metrics. The envelope ends it with the work's outcome.
type memberSync struct {
	span        trace.Span
	start       time.Time
	cluster     string
	key         types.NamespacedName
	role        memberRole
	traceparent string
	lineage     *syncLineage
}

// startSync starts the Member.Sync span. The first sync that carries out a
// change's role in the member (apply, hold or teardown; retries included) is
// a child of the change's Database.Reconcile span, so the change's trace
// shows the hub reconcile and its fan-out. Later syncs of the same change
// (woken by member events: readiness, drift) start their own trace with a
// link to the change, so a long-lived change's trace does not grow forever.
func (r *memberSyncReconciler) startSync(ctx context.Context, cluster string, key types.NamespacedName, p *plan, role memberRole) (context.Context, memberSync) {
	tracer := r.tracer
	span := telemetry.NoopSpan
	switch parent := telemetry.SpanContextOf(p.traceparent); {
	case tracer == nil:
		// Tracing is off.
	case !parent.IsValid():
		ctx, span = tracer.Start(ctx, telemetry.SpanMemberSync)
	case r.lineage.first(key, cluster, p.traceparent, role):
		ctx, span = tracer.Start(trace.ContextWithRemoteSpanContext(ctx, parent), telemetry.SpanMemberSync)
	default:
		ctx, span = tracer.Start(ctx, telemetry.SpanMemberSync, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: parent}))
	}
	if span.IsRecording() {
		span.SetAttributes(
			telemetry.AttrCluster.String(cluster),
			telemetry.AttrDatabaseNamespace.String(key.Namespace),
			telemetry.AttrDatabaseName.String(key.Name),
			telemetry.AttrDatabaseGeneration.Int64(p.generation),
			telemetry.AttrRole.String(role.String()),
			telemetry.AttrReconcileID.String(string(controller.ReconcileIDFromContext(ctx))),
		)
	}
	s := memberSync{span: span, start: time.Now(), cluster: cluster, key: key, role: role, traceparent: p.traceparent, lineage: &r.lineage}
	return telemetry.WithSpanLogger(ctx, span), s
}

// end records the sync's outcome on its metrics and span and ends the span.
// An error the work did not classify counts against the role's step.
func (s *memberSync) end(out syncOutcome) {
	if out.err != nil && out.outcome != outcomeError {
		out.outcome, out.reason = outcomeError, errorReason(s.role.String(), out.err)
	}
	if out.outcome == "" {
		out.outcome = outcomeSkipped
	}
	if out.outcome != outcomeSkipped {
		telemetry.ObserveMemberSync(s.cluster, out.outcome, time.Since(s.start))
	}
	if out.reason != "" {
		telemetry.CountMemberSyncError(s.cluster, out.reason)
	}
	switch {
	case out.outcome == outcomeTornDown:
		s.lineage.forget(s.key, s.cluster)
	case out.outcome == outcomeSynced && s.role == roleApply,
		out.outcome == outcomeObserved && s.role == roleHold:
		s.lineage.complete(s.key, s.cluster, s.traceparent, s.role)
	}

	span := s.span
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(telemetry.AttrOutcome.String(out.outcome),
		telemetry.AttrObjectsApplied.Int(len(out.applied.Applied)), telemetry.AttrObjectsRestored.Int(len(out.applied.Restored)))
	switch {
	case out.err != nil:
		span.RecordError(out.err)
		span.SetStatus(codes.Error, out.err.Error())
	case out.message != "":
		span.SetStatus(codes.Error, out.message)
	}
	span.End()
}

// isUnreachable tells errors of a member that cannot be reached (network,
// timeouts) from errors of the request itself.
func isUnreachable(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err)
}

// syncLineage remembers, per Database and member, the change (traceparent)
// and role the member last completed, so that only the syncs that carry a
// change out join its trace. Entries go when the member is torn down or the
// Database is gone. The zero value is ready to use.
type syncLineage struct {
	mu   sync.Mutex
	done map[types.NamespacedName]map[string]lineageMark
}

type lineageMark struct {
	traceparent string
	role        memberRole
}

// first reports whether the member has not completed role for the change yet.
func (l *syncLineage) first(db types.NamespacedName, cluster, traceparent string, role memberRole) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done[db][cluster] != lineageMark{traceparent, role}
}

func (l *syncLineage) complete(db types.NamespacedName, cluster, traceparent string, role memberRole) {
	if traceparent == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = map[types.NamespacedName]map[string]lineageMark{}
	}
	m := l.done[db]
	if m == nil {
		m = map[string]lineageMark{}
		l.done[db] = m
	}
	m[cluster] = lineageMark{traceparent, role}
}

func (l *syncLineage) forget(db types.NamespacedName, cluster string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.done[db], cluster)
	if len(l.done[db]) == 0 {
		delete(l.done, db)
	}
}

// forgetDatabase drops every member of a Database that is gone.
func (l *syncLineage) forgetDatabase(db types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.done, db)
}
