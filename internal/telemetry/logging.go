package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Log keys of the trace a log line belongs to (lowerCamel, like controller-runtime's reconcileID).
const (
	logKeyTraceID = "traceID"
	logKeySpanID  = "spanID"
)

// WithSpanLogger puts the span's trace and span ids into the context's
// logger, so every log line of the reconcile can be found from its trace and
// the other way round. With tracing off the span context is invalid and the
// context is returned as is: no allocation, no empty keys.
func WithSpanLogger(ctx context.Context, span trace.Span) context.Context {
	sc := span.SpanContext()
	if !sc.IsValid() {
		return ctx
	}
	log := ctrl.LoggerFrom(ctx).WithValues(logKeyTraceID, sc.TraceID().String(), logKeySpanID, sc.SpanID().String())
	return ctrl.LoggerInto(ctx, log)
}
