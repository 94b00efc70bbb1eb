package hub

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// clearOTelEnv keeps the developer's own OTEL_* settings out of a test.
func clearOTelEnv(t *testing.T) {
	for _, k := range []string{
		"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
		"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	} {
		t.Setenv(k, "")
	}
}

func TestTracingOffWithoutEndpoint(t *testing.T) {
	g := NewWithT(t)
	clearOTelEnv(t)
	before := otel.GetTracerProvider()
	shutdown, err := SetupTracing(context.Background(), "v0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(shutdown(context.Background())).To(Succeed())
	g.Expect(otel.GetTracerProvider()).To(BeIdenticalTo(before), "no endpoint: the global provider stays as it is")

	// Without a tracer the reconcilers trace nothing and publish no traceparent.
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
	s.finish(outcomeSynced)
	s.end(nil)

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	_, err = SetupTracing(context.Background(), "v0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(otel.GetTracerProvider()).To(BeIdenticalTo(before), "OTEL_SDK_DISABLED wins over an endpoint")
}

func TestTracingRejectsUnknownProtocol(t *testing.T) {
	clearOTelEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, err := SetupTracing(context.Background(), "v0")
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring(`"http/json" is not supported`)))
}

// TestTracingExportsOverHTTP runs SetupTracing's http/protobuf exporter
// against an OTLP/HTTP receiver; the gRPC one is proven by the integration
// suite (TestTracing).
func TestTracingExportsOverHTTP(t *testing.T) {
	g := NewWithT(t)
	clearOTelEnv(t)
	var (
		mu       sync.Mutex
		received []*coltracepb.ExportTraceServiceRequest
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		received = append(received, req)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	shutdown, err := SetupTracing(context.Background(), "v1.2.3")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hubTracer()).NotTo(BeNil())
	_, span := hubTracer().Start(context.Background(), SpanDatabaseReconcile)
	g.Expect(span.IsRecording()).To(BeTrue())
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g.Expect(shutdown(ctx)).To(Succeed(), "shutdown flushes the batch")

	mu.Lock()
	defer mu.Unlock()
	g.Expect(received).To(HaveLen(1))
	rs := received[0].ResourceSpans[0]
	res := map[string]string{}
	for _, kv := range rs.Resource.Attributes {
		res[kv.Key] = kv.Value.GetStringValue()
	}
	g.Expect(res).To(HaveKeyWithValue("service.name", DefaultServiceName))
	g.Expect(res).To(HaveKeyWithValue("service.version", "v1.2.3"))
	g.Expect(res).To(HaveKeyWithValue("deployment.environment.name", "test"))
	g.Expect(res).To(HaveKey("service.instance.id"))
	g.Expect(rs.ScopeSpans[0].Spans[0].Name).To(Equal(SpanDatabaseReconcile))
}

func TestTracingSamplerFromEnvironment(t *testing.T) {
	g := NewWithT(t)
	clearOTelEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	shutdown, err := SetupTracing(context.Background(), "v0")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = shutdown(context.Background()) }()
	_, span := hubTracer().Start(context.Background(), "x")
	g.Expect(span.IsRecording()).To(BeFalse())
	g.Expect(span.SpanContext().IsValid()).To(BeTrue(), "unsampled spans still propagate")
}

func TestTracingTraceparentRoundTrip(t *testing.T) {
	g := NewWithT(t)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := spanContextOf(tp)
	g.Expect(sc.IsValid()).To(BeTrue())
	g.Expect(sc.TraceID().String()).To(Equal("4bf92f3577b34da6a3ce929d0e0e4736"))
	g.Expect(traceparentOf(sc)).To(Equal(tp))
	g.Expect(spanContextOf("").IsValid()).To(BeFalse())
	g.Expect(spanContextOf("garbage").IsValid()).To(BeFalse())
	g.Expect(traceparentOf(trace.SpanContext{})).To(BeEmpty())
}

func TestTracingAPIResource(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces":                                        "namespaces",
		"/api/v1/namespaces/team-a":                                 "namespaces",
		"/api/v1/namespaces/team-a/secrets/orders-credentials":      "secrets",
		"/apis/apps/v1/namespaces/team-a/statefulsets":              "statefulsets",
		"/apis/apps/v1/namespaces/team-a/statefulsets/orders":       "statefulsets",
		"/apis/fleetdb.io/v1alpha1/namespaces/a/databases/b/status": "databases/status",
		"/apis/fleetdb.io/v1alpha1/memberclusters":                  "memberclusters",
		"/readyz": "/readyz",
	} {
		NewWithT(t).Expect(apiResource(path)).To(Equal(want), path)
	}
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
	g.Expect(tp1).To(Equal(traceparentOf(sc1)), "the first plan starts a change")
	tp2, sc2 := reconcile(&plan{uid: "u1", generation: 1, targets: targets("m1", "m2"), allowed: targets("m1")})
	g.Expect(tp2).To(Equal(tp1), "same generation and placement: the same change")
	tp3, sc3 := reconcile(&plan{uid: "u1", generation: 2, targets: targets("m1", "m2")})
	g.Expect(tp3).To(Equal(traceparentOf(sc3)), "a new generation starts a change")
	tp4, sc4 := reconcile(&plan{uid: "u1", generation: 2, targets: targets("m1")})
	g.Expect(tp4).To(Equal(traceparentOf(sc4)), "a new placement starts a change")
	tp5, sc5 := reconcile(&plan{uid: "u1", generation: 2, teardown: targets("m1")})
	g.Expect(tp5).To(Equal(traceparentOf(sc5)), "a deletion starts a change")

	spans := rec.Ended()
	g.Expect(spans).To(HaveLen(5))
	change := func(i int) string {
		for _, a := range spans[i].Attributes() {
			if a.Key == AttrChange {
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
		s.finish(outcome)
		s.end(nil)
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
