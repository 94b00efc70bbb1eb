package hub

import (
	"context"
	"io"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// BenchmarkTracingReconcilePath measures what tracing adds to one hub
// Database reconcile and one member sync, apart from their API calls:
//
//   - baseline: the code without tracing (logger enrichment, plan publishing,
//     the sync's duration metric);
//   - off: the same with the instrumentation as it runs when no
//     OTEL_EXPORTER_OTLP_* endpoint is set (no provider installed: no tracer);
//   - noop: a no-op tracer provider installed (spans started and ended, never recorded);
//   - unsampled: an SDK provider whose sampler drops everything;
//   - recording: an SDK provider recording every span (exported by a batch
//     processor to an exporter that drops them).
//
// Run it with: go test ./hub/ -run '^$' -bench TracingReconcilePath -benchmem.
func BenchmarkTracingReconcilePath(b *testing.B) {
	drop := sdktrace.NewBatchSpanProcessor(tracetest.NewNoopExporter())
	defer func() { _ = drop.Shutdown(context.Background()) }()
	providers := []struct {
		name   string
		tracer func() trace.Tracer
	}{
		{"off", func() trace.Tracer { return nil }},
		{"noop", func() trace.Tracer { return noop.NewTracerProvider().Tracer(telemetry.InstrumentationName) }},
		{"unsampled", func() trace.Tracer {
			return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())).Tracer(telemetry.InstrumentationName)
		}},
		{"recording", func() trace.Tracer {
			return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(drop)).Tracer(telemetry.InstrumentationName)
		}},
	}
	key := types.NamespacedName{Namespace: "team-a", Name: "orders"}
	targets := setOf([]string{"m1", "m2", "m3"})
	// A real JSON logger, as in production; its output is discarded.
	base := ctrl.LoggerInto(context.Background(), zap.New(zap.WriteTo(io.Discard)))

	b.Run("database/baseline", func(b *testing.B) {
		st := newState()
		b.ReportAllocs()
		for b.Loop() {
			ctx := ctrl.LoggerInto(base, ctrl.LoggerFrom(base).WithValues("database", key.String()))
			_ = ctx
			st.setPlan(key, &plan{uid: "u", generation: 1, targets: targets})
		}
	})
	for _, p := range providers {
		b.Run("database/"+p.name, func(b *testing.B) {
			r := &databaseReconciler{state: newState(), tracer: p.tracer()}
			b.ReportAllocs()
			for b.Loop() {
				ctx, span := r.startReconcileSpan(base, key)
				ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("database", key.String()))
				r.publish(ctx, key, &plan{uid: "u", generation: 1, targets: targets})
				endReconcileSpan(span, ctrl.Result{}, nil)
			}
		})
	}

	// With tracing off the Database reconcile publishes no traceparent.
	planFor := func(provider string) *plan {
		p := &plan{uid: "u", generation: 1, targets: targets, allowed: targets}
		if provider != "off" && provider != "noop" {
			p.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		}
		return p
	}
	b.Run("member/baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			start := time.Now()
			ctx := ctrl.LoggerInto(base, ctrl.LoggerFrom(base).WithValues("cluster", "m1", "database", key.String()))
			_ = ctx
			telemetry.MemberSyncDuration.WithLabelValues("m1", outcomeSynced).Observe(time.Since(start).Seconds())
		}
	})
	for _, p := range providers {
		b.Run("member/"+p.name, func(b *testing.B) {
			m := &memberSyncReconciler{tracer: p.tracer()}
			pl := planFor(p.name)
			b.ReportAllocs()
			for b.Loop() {
				ctx := ctrl.LoggerInto(base, ctrl.LoggerFrom(base).WithValues("cluster", "m1", "database", key.String()))
				_, s := m.startSync(ctx, "m1", key, pl, roleApply)
				s.end(finished(outcomeSynced, nil))
			}
		})
	}
}
