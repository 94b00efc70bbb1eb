package database

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// TestNoTracerTracesNothing: without a tracer (only in benchmarks now) the
// reconcilers trace nothing and publish no traceparent.
func TestNoTracerTracesNothing(t *testing.T) {
	g := NewWithT(t)
	r := &databaseReconciler{state: newState()}
	key := types.NamespacedName{Namespace: "a", Name: "b"}
	ctx := context.Background()
	got, span := r.startReconcileSpan(ctx, key)
	g.Expect(got).To(BeIdenticalTo(ctx), "the context is left alone")
	g.Expect(span.IsRecording()).To(BeFalse())
	r.publish(got, key, &plan{uid: "u", generation: 1, targets: setOf([]string{"m1"})})
	endReconcileSpan(span, ctrl.Result{}, nil)
	g.Expect(r.state.plan(key).traceparent).To(BeEmpty())
	m := &memberSyncReconciler{}
	got, s := m.startSync(ctx, "m1", key, r.state.plan(key), roleApply)
	g.Expect(got).To(BeIdenticalTo(ctx))
	s.end(finished(outcomeSynced, nil))
}

// TestTracingOffHasIDs: with tracing off (no exporter: telemetry.Tracer's
// ID-only provider) a reconcile's span has a real trace id, which its logger
// and the plan's (unsampled) traceparent carry, and the member sync joins
// that trace.
func TestTracingOffHasIDs(t *testing.T) {
	g := NewWithT(t)
	r := &databaseReconciler{state: newState(), tracer: telemetry.Tracer()}
	key := types.NamespacedName{Namespace: "a", Name: "b"}
	ctx, span := r.startReconcileSpan(context.Background(), key)
	sc := span.SpanContext()
	g.Expect(sc.IsValid()).To(BeTrue())
	g.Expect(span.IsRecording()).To(BeFalse())
	r.publish(ctx, key, &plan{uid: "u", generation: 1, targets: setOf([]string{"m1"})})
	endReconcileSpan(span, ctrl.Result{}, nil)
	tp := r.state.plan(key).traceparent
	g.Expect(tp).To(Equal("00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-00"))
	m := &memberSyncReconciler{tracer: telemetry.Tracer()}
	_, s := m.startSync(context.Background(), "m1", key, r.state.plan(key), roleApply)
	g.Expect(s.span.SpanContext().TraceID()).To(Equal(sc.TraceID()), "the member sync joins the change's trace")
	s.end(finished(outcomeSynced, nil))
}

// TestTracingChangeLineage: a new generation or placement starts a change
// (a new trace the member syncs join); other reconciles continue it with a link.
func TestTracingChangeLineage(t *testing.T) {
	g := NewWithT(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	r := &databaseReconciler{state: newState(), tracer: tp.Tracer("test")}
	key := types.NamespacedName{Namespace: "team-a", Name: "orders"}
	targets := func(names ...string) map[string]bool { return setOf(names) }

	reconcile := func(p *plan) (string, trace.SpanContext) {
		ctx, span := r.startReconcileSpan(context.Background(), key)
		r.publish(ctx, key, p)
		endReconcileSpan(span, ctrl.Result{}, nil)
		return r.state.plan(key).traceparent, span.SpanContext()
	}
	tp1, sc1 := reconcile(&plan{uid: "u1", generation: 1, targets: targets("m1", "m2")})
	g.Expect(tp1).To(Equal(telemetry.TraceparentOf(sc1)), "the first plan starts a change")
	tp2, sc2 := reconcile(&plan{uid: "u1", generation: 1, targets: targets("m1", "m2"), allowed: targets("m1")})
	g.Expect(tp2).To(Equal(tp1), "same generation and placement: the same change")
	tp3, sc3 := reconcile(&plan{uid: "u1", generation: 2, targets: targets("m1", "m2")})
	g.Expect(tp3).To(Equal(telemetry.TraceparentOf(sc3)), "a new generation starts a change")
	tp4, sc4 := reconcile(&plan{uid: "u1", generation: 2, targets: targets("m1")})
	g.Expect(tp4).To(Equal(telemetry.TraceparentOf(sc4)), "a new placement starts a change")
	tp5, sc5 := reconcile(&plan{uid: "u1", generation: 2, teardown: targets("m1")})
	g.Expect(tp5).To(Equal(telemetry.TraceparentOf(sc5)), "a deletion starts a change")

	spans := rec.Ended()
	g.Expect(spans).To(HaveLen(5))
	change := func(i int) string {
		for _, a := range spans[i].Attributes() {
			if a.Key == telemetry.AttrChange {
				return a.Value.AsString()
			}
		}
		return ""
	}
	g.Expect([]string{change(0), change(1), change(2), change(3), change(4)}).To(Equal([]string{"new", "continued", "new", "new", "new"}))
	g.Expect(spans[1].Links()).To(HaveLen(1))
	g.Expect(spans[1].Links()[0].SpanContext.SpanID()).To(Equal(sc1.SpanID()), "a continued reconcile links to the change")
	g.Expect(sc2.TraceID()).NotTo(Equal(sc1.TraceID()), "every reconcile is its own trace")

	// Member syncs: the first that carries out a role is a child of the
	// change; once it completed, later ones are roots linked to it.
	m := &memberSyncReconciler{tracer: tp.Tracer("test")}
	p := r.state.plan(key)
	runSync := func(role memberRole, outcome string) sdktrace.ReadOnlySpan {
		_, s := m.startSync(context.Background(), "m1", key, p, role)
		s.end(finished(outcome, nil))
		all := rec.Ended()
		return all[len(all)-1]
	}
	first := runSync(roleTeardown, outcomeTeardownWaiting)
	g.Expect(first.Parent().SpanID()).To(Equal(sc5.SpanID()))
	g.Expect(first.Parent().TraceID()).To(Equal(sc5.TraceID()))
	retry := runSync(roleTeardown, outcomeTornDown)
	g.Expect(retry.Parent().SpanID()).To(Equal(sc5.SpanID()), "until the role is done, syncs stay in the change's trace")

	p = &plan{uid: "u1", generation: 3, targets: targets("m1"), allowed: targets("m1"), traceparent: tp1}
	applied := runSync(roleApply, outcomeSynced)
	g.Expect(applied.Parent().SpanID()).To(Equal(sc1.SpanID()))
	later := runSync(roleApply, outcomeSynced)
	g.Expect(later.Parent().IsValid()).To(BeFalse(), "a later sync of a completed change is a root")
	g.Expect(later.Links()).To(HaveLen(1))
	g.Expect(later.Links()[0].SpanContext.SpanID()).To(Equal(sc1.SpanID()))
}
