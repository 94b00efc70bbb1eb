package database

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
//   - off-before: the instrumentation as it ran without an OTEL_EXPORTER_OTLP_*
//     endpoint before spans got ids there (no tracer: nothing started);
//   - noop: a no-op tracer provider installed (spans started and ended, never recorded);
//   - off: the instrumentation as it runs now without an endpoint
//     (telemetry.Tracer's ID-only SDK provider: spans with real ids, never
//     recorded, nothing exported; the reconcile's logger has a trace slot);
//   - on: an SDK provider recording every span (exported by a batch
//     processor to an exporter that drops them).
//
// Every variant logs one line per reconcile, as a reconcile that writes a
// status does, to a JSON logger writing to io.Discard.
//
// Run it with: go test ./hub/internal/database/ -run '^$' -bench TracingReconcilePath -benchmem.
func BenchmarkTracingReconcilePath(b *testing.B) {
	drop := sdktrace.NewBatchSpanProcessor(tracetest.NewNoopExporter())
	defer func() { _ = drop.Shutdown(context.Background()) }()
	providers := []struct {
		name   string
		tracer func() trace.Tracer
		slot   bool
	}{
		{"off-before", func() trace.Tracer { return nil }, false},
		{"noop", func() trace.Tracer { return noop.NewTracerProvider().Tracer(telemetry.InstrumentationName) }, false},
		{"off", telemetry.Tracer, true},
		{"on", func() trace.Tracer {
			return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(drop)).Tracer(telemetry.InstrumentationName)
		}, true},
	}
	key := types.NamespacedName{Namespace: "team-a", Name: "orders"}
	targets := setOf([]string{"m1", "m2", "m3"})
	// A real JSON logger, as in production; its output is discarded.
	logger := zap.New(zap.WriteTo(io.Discard))
	base := ctrl.LoggerInto(context.Background(), logger)
	// baseFor is the context controller-runtime hands a reconcile: with a
	// trace slot when the controllers are built with reconcileLogs.
	reconcileLogger := telemetry.ReconcileLoggers(logger)
	baseFor := func(slot bool) context.Context {
		if slot {
			return ctrl.LoggerInto(context.Background(), reconcileLogger())
		}
		return base
	}

	b.Run("database/baseline", func(b *testing.B) {
		st := newState()
		b.ReportAllocs()
		for b.Loop() {
			ctx := ctrl.LoggerInto(base, ctrl.LoggerFrom(base).WithValues("database", key.String()))
			st.setPlan(key, &plan{uid: "u", generation: 1, targets: targets})
			ctrl.LoggerFrom(ctx).Info("Database status updated")
		}
	})
	for _, p := range providers {
		b.Run("database/"+p.name, func(b *testing.B) {
			r := &databaseReconciler{state: newState(), tracer: p.tracer()}
			b.ReportAllocs()
			for b.Loop() {
				ctx, span := r.startReconcileSpan(baseFor(p.slot), key)
				ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("database", key.String()))
				r.publish(ctx, key, &plan{uid: "u", generation: 1, targets: targets})
				ctrl.LoggerFrom(ctx).Info("Database status updated")
				endReconcileSpan(span, ctrl.Result{}, nil)
			}
		})
	}

	// Without spans ids the Database reconcile publishes no traceparent;
	// with the ID-only provider an unsampled one.
	planFor := func(provider string) *plan {
		p := &plan{uid: "u", generation: 1, targets: targets, allowed: targets}
		switch provider {
		case "off":
			p.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
		case "on":
			p.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		}
		return p
	}
	b.Run("member/baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			start := time.Now()
			ctx := ctrl.LoggerInto(base, ctrl.LoggerFrom(base).WithValues("cluster", "m1", "database", key.String()))
			ctrl.LoggerFrom(ctx).Info("member synced")
			telemetry.MemberSyncDuration.WithLabelValues("m1", outcomeSynced).Observe(time.Since(start).Seconds())
		}
	})
	for _, p := range providers {
		b.Run("member/"+p.name, func(b *testing.B) {
			m := &memberSyncReconciler{tracer: p.tracer()}
			pl := planFor(p.name)
			b.ReportAllocs()
			for b.Loop() {
				b0 := baseFor(p.slot)
				ctx := ctrl.LoggerInto(b0, ctrl.LoggerFrom(b0).WithValues("cluster", "m1", "database", key.String()))
				ctx, s := m.startSync(ctx, "m1", key, pl, roleApply)
				ctrl.LoggerFrom(ctx).Info("member synced")
				s.end(finished(outcomeSynced, nil))
			}
		})
	}
}
