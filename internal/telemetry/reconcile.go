package telemetry

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Outcomes of a reconcile (AttrOutcome): done, done but looks again later,
// failed and retried, or failed for good until something changes.
const (
	OutcomeOK       = "ok"
	OutcomeRequeue  = "requeue"
	OutcomeError    = "error"
	OutcomeTerminal = "terminal"
)

// Spans of the controllers that have no span of their own in their reconcile.
const (
	SpanBackupReconcile = "DatabaseBackup.Reconcile"
	SpanSweep           = "Member.Sweep"
)

// ReconcileLogs is the LogConstructor of fleetdb's controllers: what the
// builders make by default (the manager's logger with the controller's
// name), the request's keys (keys: "database", "cluster"...; on every line
// of the reconcile, controller-runtime's own included), and for a reconcile a logger
// with a trace slot (ReconcileLoggers). The reconcile's span fills
// the slot, so controller-runtime's own lines of the reconcile, the
// "Reconciler error" line above all, whose logger is built before the
// reconcile runs, carry the reconcile's trace id like the reconcile's own.
func ReconcileLogs[req any](base logr.Logger, name string, keys func(*req) []any) func(*req) logr.Logger {
	log := base.WithValues("controller", name)
	forReconcile := ReconcileLoggers(log)
	return func(r *req) logr.Logger {
		if r == nil {
			return log
		}
		if keys == nil {
			return forReconcile()
		}
		return forReconcile(keys(r)...)
	}
}

// TracedReconciler runs a reconcile in a root span of its own, for the
// controllers whose reconcile starts none itself, so that their log lines
// carry a trace id too.
type TracedReconciler[req comparable] struct {
	Inner  reconcile.TypedReconciler[req]
	Tracer trace.Tracer
	Span   string
}

// Reconcile implements reconcile.TypedReconciler.
func (t TracedReconciler[req]) Reconcile(ctx context.Context, r req) (res ctrl.Result, err error) {
	ctx, span := t.Tracer.Start(ctx, t.Span, trace.WithNewRoot())
	if span.IsRecording() {
		span.SetAttributes(AttrReconcileID.String(string(controller.ReconcileIDFromContext(ctx))))
	}
	defer func() { EndReconcileSpan(span, res, err) }()
	return t.Inner.Reconcile(WithSpanLogger(ctx, span), r)
}

// EndReconcileSpan records how the reconcile ended and ends its span.
func EndReconcileSpan(span trace.Span, res ctrl.Result, err error) {
	if span.IsRecording() {
		outcome := OutcomeOK
		switch {
		case errors.Is(err, reconcile.TerminalError(nil)):
			outcome = OutcomeTerminal
		case err != nil:
			outcome = OutcomeError
		case res.RequeueAfter > 0:
			outcome = OutcomeRequeue
		}
		span.SetAttributes(AttrOutcome.String(outcome))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
