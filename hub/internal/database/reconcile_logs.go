package database

import (
	"context"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// Spans of the controllers that have no span of their own in their reconcile.
const (
	spanBackupReconcile = "DatabaseBackup.Reconcile"
	spanSweep           = "Member.Sweep"
)

// reconcileLogs is the LogConstructor of fleetdb's controllers: what the
// builders make by default (the manager's logger with the controller's
// name), the request's keys (keys: "database", "cluster"...; on every line
// of the reconcile, controller-runtime's own included), and for a reconcile a logger
// with a trace slot (telemetry.ReconcileLoggers). The reconcile's span fills
// the slot, so controller-runtime's own lines of the reconcile, the
// "Reconciler error" line above all, whose logger is built before the
// reconcile runs, carry the reconcile's trace id like the reconcile's own.
func reconcileLogs[req any](base logr.Logger, name string, keys func(*req) []any) func(*req) logr.Logger {
	log := base.WithValues("controller", name)
	forReconcile := telemetry.ReconcileLoggers(log)
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

// tracedReconciler runs a reconcile in a root span of its own, for the
// controllers whose reconcile starts none itself, so that their log lines
// carry a trace id too.
type tracedReconciler[req comparable] struct {
	inner  reconcile.TypedReconciler[req]
	tracer trace.Tracer
	span   string
}

// Reconcile implements reconcile.TypedReconciler.
func (t tracedReconciler[req]) Reconcile(ctx context.Context, r req) (res ctrl.Result, err error) {
	ctx, span := t.tracer.Start(ctx, t.span, trace.WithNewRoot())
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrReconcileID.String(string(controller.ReconcileIDFromContext(ctx))))
	}
	defer func() { endReconcileSpan(span, res, err) }()
	return t.inner.Reconcile(telemetry.WithSpanLogger(ctx, span), r)
}
