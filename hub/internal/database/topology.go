package database

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/hub/internal/topology"
	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// Spans of a switchover: one per step, and one for the whole switchover when
// it ends, all in the trace whose id status.topology.switchover.traceID holds.
const (
	spanSwitchover     = "Topology.Switchover"
	spanSwitchoverStep = "Topology.SwitchoverStep"
)

var (
	attrSwitchoverKind = attribute.Key("fleetdb.switchover.kind")
	attrSwitchoverFrom = attribute.Key("fleetdb.switchover.from")
	attrSwitchoverTo   = attribute.Key("fleetdb.switchover.to")
	attrSwitchoverStep = attribute.Key("fleetdb.switchover.step")
)

// reconcileTopology runs the primary/standby topology of a PrimaryStandby
// Database: it records the primary at creation, runs a switchover when
// spec.topology.primaryCluster names another member (a forced promotion with
// spec.topology.failover), and summarises the topology. It writes nothing
// to members: they render from the status this reconcile stores
// (decideRole), so every step is resumable after a hub restart.
func (r *databaseReconciler) reconcileTopology(ctx context.Context, s *databaseScope) (ctrl.Result, error) {
	s.topologyPass = nil
	if s.db.TopologyMode() != fleetv1alpha1.TopologyPrimaryStandby || s.db.Spec.Topology == nil {
		return ctrl.Result{}, nil
	}
	// reconcileTopologyWiring stalled a Database whose primaryCluster is not placed.
	views := map[string]topology.MemberView{}
	for m := range s.targets {
		// Unreachable is the registry's verdict. A member it is still
		// connecting to (a hub that just started) is not: it has not
		// reported yet, and a sync that ran before the connection (which
		// records it Unreachable) is no report either.
		h := r.provider.Health(m)
		v := topology.MemberView{Unreachable: !h.Ready && h.Reason != "" && h.Reason != fleetv1alpha1.ReasonConnecting}
		if res := s.results[m]; res != nil && !res.Unreachable {
			v.Replication, v.At, v.Reported = res.Replication, res.At, true
		}
		views[m] = v
	}
	in := topology.Input{DB: s.db, Targets: s.targets, Views: views, Now: r.now()}
	if r.tracer != nil {
		in.NewTraceID = newTraceID
	}
	if r.shard != nil {
		// The leader runs this pass; it decides on reports only the
		// owner of a member has (docs/sharding.md).
		in.Owns = r.shard.coord.Owns
	}
	pass := topology.Run(in)
	s.topologyPass = pass
	for _, e := range pass.Events {
		kind := corev1.EventTypeNormal
		if e.Warning {
			kind = corev1.EventTypeWarning
		}
		r.recorder.Eventf(s.db, nil, kind, e.Reason, "Topology", "%s", e.Message)
	}
	r.switchoverSpans(ctx, s.db, pass)
	requeue := pass.Requeue
	for m, since := range pass.Awaited {
		if w := s.topology[m]; w != nil {
			var next time.Duration
			w.ReportRequest, next = topology.ReportRequest(since, r.now())
			requeue = minPositive(requeue, next)
		}
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// newTraceID is a random trace id for a switchover's trace.
func newTraceID() string {
	var id trace.TraceID
	_, _ = rand.Read(id[:])
	return id.String()
}

// switchoverSpans records a span for every step that ended in this pass,
// and one for the switchover when it finished, as children of one parent
// derived from the switchover's trace id: across reconciles and hub
// restarts the steps of a switchover make one trace.
func (r *databaseReconciler) switchoverSpans(ctx context.Context, db *fleetv1alpha1.Database, pass *topology.Pass) {
	if r.tracer == nil {
		return
	}
	link := trace.LinkFromContext(ctx)
	for _, f := range pass.Finished {
		r.switchoverSpan(ctx, db, spanSwitchoverStep, f, link)
	}
	if last := pass.Status.LastSwitchover; last != nil && last.Finished != nil && pass.Status.Switchover == nil &&
		(db.Status.Topology == nil || db.Status.Topology.Switchover != nil) {
		r.switchoverSpan(ctx, db, spanSwitchover, topology.FinishedStep{Switchover: *last, Started: last.Started.Time, Ended: last.Finished.Time, Outcome: last.Outcome}, link)
	}
}

func (r *databaseReconciler) switchoverSpan(ctx context.Context, db *fleetv1alpha1.Database, name string, f topology.FinishedStep, link trace.Link) {
	parent, ok := switchoverParent(f.Switchover.TraceID)
	if !ok {
		return
	}
	attrs := []attribute.KeyValue{
		telemetry.AttrDatabaseNamespace.String(db.Namespace), telemetry.AttrDatabaseName.String(db.Name),
		attrSwitchoverKind.String(string(f.Switchover.Kind)), attrSwitchoverFrom.String(f.Switchover.From), attrSwitchoverTo.String(f.Switchover.To),
		telemetry.AttrOutcome.String(f.Outcome),
	}
	if f.Step != "" {
		attrs = append(attrs, attrSwitchoverStep.String(string(f.Step)))
	}
	_, span := r.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, parent), name,
		trace.WithTimestamp(f.Started), trace.WithAttributes(attrs...), trace.WithLinks(link))
	span.End(trace.WithTimestamp(f.Ended))
}

// switchoverParent is the span context every span of a switchover hangs
// from: its trace id, and a span id derived from it.
func switchoverParent(traceID string) (trace.SpanContext, bool) {
	tid, err := trace.TraceIDFromHex(traceID)
	if err != nil {
		return trace.SpanContext{}, false
	}
	sum := sha256.Sum256(tid[:])
	var sid trace.SpanID
	copy(sid[:], sum[:8])
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true,
	}), true
}
