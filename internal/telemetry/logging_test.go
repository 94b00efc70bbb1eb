package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel/trace"
	uberzap "go.uber.org/zap"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// TestIDOnlyTracer: without an exporter, Tracer's spans have real ids, are
// not sampled nor recorded, and children keep their parent's trace id.
func TestIDOnlyTracer(t *testing.T) {
	g := NewWithT(t)
	ctx, parent := Tracer().Start(context.Background(), "parent")
	defer parent.End()
	psc := parent.SpanContext()
	g.Expect(psc.IsValid()).To(BeTrue())
	g.Expect(psc.IsSampled()).To(BeFalse())
	g.Expect(parent.IsRecording()).To(BeFalse())
	_, child := Tracer().Start(ctx, "child")
	defer child.End()
	g.Expect(child.SpanContext().TraceID()).To(Equal(psc.TraceID()))
	g.Expect(child.SpanContext().SpanID()).NotTo(Equal(psc.SpanID()))
	// A sampled remote parent (a switchover's) is not recorded either.
	remote := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: psc.TraceID(), SpanID: psc.SpanID(), TraceFlags: trace.FlagsSampled, Remote: true}))
	_, rc := Tracer().Start(remote, "remote-child")
	g.Expect(rc.IsRecording()).To(BeFalse())
	g.Expect(rc.SpanContext().TraceID()).To(Equal(psc.TraceID()))
}

// TestReconcileLoggerTraceSlot: a logger built before the span started (as
// controller-runtime builds the "Reconciler error" logger), and every logger
// derived from it, log the trace id WithSpanLogger gives the reconcile.
func TestReconcileLoggerTraceSlot(t *testing.T) {
	g := NewWithT(t)
	var buf bytes.Buffer
	before := ReconcileLoggers(zap.New(zap.WriteTo(&buf), zap.RawZapOpts(uberzap.AddCaller())).WithValues("controller", "c"))("name", "n").WithValues("reconcileID", "r1")
	before.Info("no span yet")
	ctx, span := Tracer().Start(ctrl.LoggerInto(context.Background(), before), "s")
	ctx = WithSpanLogger(ctx, span)
	ctrl.LoggerFrom(ctx).WithName("inner").WithValues("k", "v").Info("inside")
	before.Error(nil, "Reconciler error")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	g.Expect(lines).To(HaveLen(3))
	var got []map[string]any
	for _, l := range lines {
		m := map[string]any{}
		g.Expect(json.Unmarshal([]byte(l), &m)).To(Succeed())
		got = append(got, m)
	}
	g.Expect(got[0]).NotTo(HaveKey("traceID"))
	for _, m := range got[1:] {
		g.Expect(m).To(HaveKeyWithValue("traceID", span.SpanContext().TraceID().String()), m["msg"])
		g.Expect(m).To(HaveKeyWithValue("spanID", span.SpanContext().SpanID().String()))
		g.Expect(m).To(HaveKeyWithValue("reconcileID", "r1"))
		g.Expect(m).To(HaveKeyWithValue("name", "n"))
		g.Expect(m["caller"]).To(ContainSubstring("logging_test.go"), "the caller is the test, not the sink")
	}
}
