package telemetry

import (
	"context"
	"sync/atomic"

	"github.com/go-logr/logr"
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
// the other way round. A logger made by ReconcileLoggers gets the ids in its
// trace slot: then the lines logged by the logger's other users (such as
// controller-runtime's "Reconciler error" line, whose logger is built before
// the reconcile starts) carry them too, and the context is returned as is.
// An invalid span context (a no-op tracer) adds nothing.
func WithSpanLogger(ctx context.Context, span trace.Span) context.Context {
	sc := span.SpanContext()
	if !sc.IsValid() {
		return ctx
	}
	log := ctrl.LoggerFrom(ctx)
	if ts, ok := log.GetSink().(*traceSink); ok {
		ts.slot.set(sc)
		return ctx
	}
	log = log.WithValues(logKeyTraceID, sc.TraceID().String(), logKeySpanID, sc.SpanID().String())
	return ctrl.LoggerInto(ctx, log)
}

// ReconcileLoggers returns the maker of reconcile loggers from log: each
// logger it makes (log with kv) has a trace slot of its own, and every line
// logged through it or a logger derived from it carries the trace and span
// ids WithSpanLogger puts into the slot later, once the reconcile has
// started its span. Controllers build their reconcile's logger with it
// (LogConstructor), so the line controller-runtime logs with that logger
// after the reconcile returned (the "Reconciler error" line) can be found
// from the trace too. The sink's call depth is adjusted once, here.
func ReconcileLoggers(log logr.Logger) func(kv ...any) logr.Logger {
	sink := log.GetSink()
	if sink == nil {
		return func(kv ...any) logr.Logger { return log.WithValues(kv...) }
	}
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		// One frame more: traceSink's own method.
		sink = cd.WithCallDepth(1)
	}
	return func(kv ...any) logr.Logger {
		s := sink
		if len(kv) > 0 {
			s = s.WithValues(kv...)
		}
		return log.WithSink(&traceSink{LogSink: s, slot: &traceSlot{}})
	}
}

// traceSlot holds the ids of a reconcile's span once it started, rendered
// once.
type traceSlot struct {
	ids atomic.Pointer[[4]any]
}

func (s *traceSlot) set(sc trace.SpanContext) {
	s.ids.Store(&[4]any{logKeyTraceID, sc.TraceID().String(), logKeySpanID, sc.SpanID().String()})
}

// with appends the trace and span ids to kv, when the slot is set.
func (s *traceSlot) with(kv []any) []any {
	ids := s.ids.Load()
	if ids == nil {
		return kv
	}
	out := make([]any, 0, len(kv)+len(ids))
	out = append(out, kv...)
	return append(out, ids[:]...)
}

// traceSink is a LogSink whose lines carry the ids of its trace slot.
type traceSink struct {
	logr.LogSink
	slot *traceSlot
}

var _ logr.CallDepthLogSink = &traceSink{}

func (t *traceSink) Info(level int, msg string, kv ...any) {
	t.LogSink.Info(level, msg, t.slot.with(kv)...)
}

func (t *traceSink) Error(err error, msg string, kv ...any) {
	t.LogSink.Error(err, msg, t.slot.with(kv)...)
}

func (t *traceSink) WithValues(kv ...any) logr.LogSink {
	return &traceSink{LogSink: t.LogSink.WithValues(kv...), slot: t.slot}
}

func (t *traceSink) WithName(name string) logr.LogSink {
	return &traceSink{LogSink: t.LogSink.WithName(name), slot: t.slot}
}

// WithCallDepth implements logr.CallDepthLogSink, so callers (zap's
// "caller") stay right.
func (t *traceSink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := t.LogSink.(logr.CallDepthLogSink); ok {
		return &traceSink{LogSink: cd.WithCallDepth(depth), slot: t.slot}
	}
	return t
}
