package telemetry

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
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
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
	shutdown, err := SetupTracing(context.Background(), "v0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(shutdown(context.Background())).To(Succeed())
	g.Expect(otel.GetTracerProvider()).To(BeIdenticalTo(idOnlyProvider), "no endpoint: the ID-only provider")
	_, span := Tracer().Start(context.Background(), "s")
	g.Expect(span.SpanContext().IsValid()).To(BeTrue(), "spans have real ids")
	g.Expect(span.IsRecording()).To(BeFalse(), "and are not recorded")
	ctx := context.Background()
	g.Expect(WithSpanLogger(ctx, NoopSpan)).To(BeIdenticalTo(ctx), "no span: the logger is left alone")

	otel.SetTracerProvider(noop.NewTracerProvider())
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	_, err = SetupTracing(context.Background(), "v0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(otel.GetTracerProvider()).To(BeIdenticalTo(idOnlyProvider), "OTEL_SDK_DISABLED wins over an endpoint")
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
	g.Expect(Tracer()).NotTo(BeNil())
	_, span := Tracer().Start(context.Background(), SpanDatabaseReconcile)
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
	_, span := Tracer().Start(context.Background(), "x")
	g.Expect(span.IsRecording()).To(BeFalse())
	g.Expect(span.SpanContext().IsValid()).To(BeTrue(), "unsampled spans still propagate")
}

func TestTracingTraceparentRoundTrip(t *testing.T) {
	g := NewWithT(t)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := SpanContextOf(tp)
	g.Expect(sc.IsValid()).To(BeTrue())
	g.Expect(sc.TraceID().String()).To(Equal("4bf92f3577b34da6a3ce929d0e0e4736"))
	g.Expect(TraceparentOf(sc)).To(Equal(tp))
	g.Expect(SpanContextOf("").IsValid()).To(BeFalse())
	g.Expect(SpanContextOf("garbage").IsValid()).To(BeFalse())
	g.Expect(TraceparentOf(trace.SpanContext{})).To(BeEmpty())
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
