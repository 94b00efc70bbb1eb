package telemetry

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	"go.opentelemetry.io/otel/trace"
	ctrl "sigs.k8s.io/controller-runtime"
)

// DefaultServiceName is the service.name of the hub's spans unless
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const DefaultServiceName = "fleetdb-hub"

// InstrumentationName is the instrumentation scope of fleetdb's spans.
const InstrumentationName = "github.com/fleetdb/fleetdb/hub"

// Span names.
const (
	// SpanDatabaseReconcile is the span of one hub Database reconcile.
	SpanDatabaseReconcile = "Database.Reconcile"
	// SpanMemberSync is the span of one member sync (one Database in one member).
	SpanMemberSync = "Member.Sync"
)

// Span attributes of fleetdb's spans.
const (
	AttrDatabaseNamespace  = attribute.Key("fleetdb.database.namespace")
	AttrDatabaseName       = attribute.Key("fleetdb.database.name")
	AttrDatabaseUID        = attribute.Key("fleetdb.database.uid")
	AttrDatabaseGeneration = attribute.Key("fleetdb.database.generation")
	// AttrDatabasePhase is the phase the reconcile computed for the Database.
	AttrDatabasePhase = attribute.Key("fleetdb.database.phase")
	// AttrMembersPlanned is the number of members the Database is placed on.
	AttrMembersPlanned = attribute.Key("fleetdb.members.planned")
	// AttrMembersTeardown is the number of members it is being removed from.
	AttrMembersTeardown = attribute.Key("fleetdb.members.teardown")
	// AttrChange is "new" when the reconcile starts a change (a new
	// generation or placement: its trace is the one member syncs and member
	// objects carry) and "continued" when it works on the current change,
	// which its span then links to.
	AttrChange = attribute.Key("fleetdb.change")
	// AttrCluster is the member cluster of a member sync (and of a member API call).
	AttrCluster = attribute.Key("fleetdb.cluster")
	// AttrRole is what the member sync does: apply, hold (observe only) or teardown.
	AttrRole = attribute.Key("fleetdb.member.role")
	// AttrObjectsApplied and AttrObjectsRestored count member objects written
	// and, among them, those put back after drift.
	AttrObjectsApplied  = attribute.Key("fleetdb.objects.applied")
	AttrObjectsRestored = attribute.Key("fleetdb.objects.restored")
	// AttrOutcome is how the reconcile or sync ended (see the outcome* constants).
	AttrOutcome = attribute.Key("fleetdb.outcome")
	// AttrReconcileID is controller-runtime's reconcileID, also on every log line.
	AttrReconcileID = attribute.Key("fleetdb.reconcile_id")
)

// Values of AttrChange.
const (
	// ChangeNew: the reconcile starts a change.
	ChangeNew = "new"
	// ChangeContinued: the reconcile works on the current change.
	ChangeContinued = "continued"
)

// SetupTracing configures OpenTelemetry tracing from the standard OTEL_*
// environment variables and returns the function that flushes and stops it.
//
//   - OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT turns
//     exporting on; without either (or with OTEL_SDK_DISABLED=true or
//     OTEL_TRACES_EXPORTER=none) the global tracer provider is the ID-only
//     one (see TracingOff): spans get real trace and span ids, for the log
//     lines and member objects, and are neither recorded nor exported.
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL picks
//     the exporter: "grpc" or "http/protobuf" (the default, as the
//     OpenTelemetry specification says). Headers, TLS, compression and timeout
//     come from the exporters' own OTEL_EXPORTER_OTLP_* variables.
//   - OTEL_SERVICE_NAME (default DefaultServiceName) and
//     OTEL_RESOURCE_ATTRIBUTES extend the resource, which also names the hub
//     instance (POD_NAME or the host name) and version.
//   - OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG choose the sampler
//     (default parentbased_always_on); OTEL_BSP_* tune the batch processor.
//
// Spans are exported in the background by a batch span processor that drops
// spans rather than wait when its queue is full, so an unreachable collector
// never slows a reconcile down. The W3C tracecontext (and baggage)
// propagator is installed in every case.
func SetupTracing(ctx context.Context, version string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	off := func(context.Context) error { return nil }
	if !tracingRequested() {
		TracingOff()
		return off, nil
	}
	exp, err := newTraceExporter(ctx)
	if err != nil {
		return off, err
	}
	res, err := tracingResource(ctx, version)
	if err != nil {
		return off, err
	}
	log := ctrl.Log.WithName("otel")
	otel.SetLogger(log)
	otel.SetErrorHandler(&throttledErrorHandler{log: log, every: time.Minute})
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

func tracingRequested() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// newTraceExporter builds the OTLP exporter of the configured protocol; the
// exporters read their endpoint and settings from the environment. Neither
// connects here: a collector that is down at start is no start-up error.
func newTraceExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol {
	case "grpc":
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("creating the OTLP/gRPC trace exporter: %w", err)
		}
		return exp, nil
	case "", "http/protobuf":
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("creating the OTLP/HTTP trace exporter: %w", err)
		}
		return exp, nil
	default:
		return nil, fmt.Errorf("OTLP protocol %q is not supported: use grpc or http/protobuf", protocol)
	}
}

// tracingResource describes the hub: defaults first, so that the
// environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) overrides them.
func tracingResource(ctx context.Context, version string) (*resource.Resource, error) {
	host, _ := os.Hostname()
	instance := os.Getenv("POD_NAME")
	if instance == "" {
		instance = host
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(DefaultServiceName)}
	if version != "" {
		attrs = append(attrs, semconv.ServiceVersion(version))
	}
	if instance != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(instance))
	}
	if host != "" {
		attrs = append(attrs, semconv.HostName(host))
	}
	if pod := os.Getenv("POD_NAME"); pod != "" {
		attrs = append(attrs, semconv.K8SPodName(pod))
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		attrs = append(attrs, semconv.K8SNamespaceName(ns))
	}
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("describing the hub for tracing: %w", err)
	}
	return res, nil
}

// throttledErrorHandler logs OpenTelemetry errors (failed exports, mostly)
// at most once per period, with the number it kept quiet about: a collector
// that is down must not flood the hub's logs.
type throttledErrorHandler struct {
	log interface {
		Error(err error, msg string, kv ...any)
	}
	every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Handle implements otel.ErrorHandler.
func (h *throttledErrorHandler) Handle(err error) {
	h.mu.Lock()
	now := time.Now()
	if !h.last.IsZero() && now.Sub(h.last) < h.every {
		h.suppressed++
		h.mu.Unlock()
		return
	}
	suppressed := h.suppressed
	h.last, h.suppressed = now, 0
	h.mu.Unlock()
	h.log.Error(err, "OpenTelemetry error (spans may be lost; reconciles are not affected)", "suppressedSinceLast", suppressed)
}

// defaultTracerProvider is the global provider before anyone installed one.
var defaultTracerProvider = otel.GetTracerProvider()

// idOnlyProvider is the tracer provider of a hub that exports no traces: an
// SDK provider without span processors whose sampler records nothing. Its
// spans are not recorded (no attributes, events or export: the cost is the
// ids and one small allocation, see docs/reports/benchmarks.md) but have real trace
// and span ids, children keep their parent's trace id, so every log line
// of a reconcile carries a trace id an on-call engineer can follow one
// change by, and the member objects carry a (not sampled) traceparent.
var idOnlyProvider = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))

// TracingOff installs the ID-only tracer provider as the global one: spans
// with real ids, recorded and exported never.
func TracingOff() {
	otel.SetTracerProvider(idOnlyProvider)
}

// Tracer is the tracer of fleetdb's spans, from the global provider; the
// ID-only provider's while none was installed (SetupTracing not called, as
// in tests). Never nil. The controllers take it when they are set up:
// SetupTracing runs before NewManager.
func Tracer() trace.Tracer {
	tp := otel.GetTracerProvider()
	if tp == defaultTracerProvider {
		tp = idOnlyProvider
	}
	return tp.Tracer(InstrumentationName)
}

// NoopSpan is the span of a reconcile without a tracer.
var NoopSpan = trace.SpanFromContext(context.Background())

// TraceparentOf renders a span context as a W3C traceparent ("" when invalid).
func TraceparentOf(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	// 00-<32 hex>-<16 hex>-<2 hex>, without fmt: it runs on every change.
	var b [55]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	copy(b[:3], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:])
}

// SpanContextOf parses a W3C traceparent (version 00); the zero SpanContext
// when it is not one.
func SpanContextOf(traceparent string) trace.SpanContext {
	if len(traceparent) != 55 || traceparent[:3] != "00-" || traceparent[35] != '-' || traceparent[52] != '-' {
		return trace.SpanContext{}
	}
	tid, err := trace.TraceIDFromHex(traceparent[3:35])
	if err != nil {
		return trace.SpanContext{}
	}
	sid, err := trace.SpanIDFromHex(traceparent[36:52])
	if err != nil {
		return trace.SpanContext{}
	}
	var flags [1]byte
	if _, err := hex.Decode(flags[:], []byte(traceparent[53:55])); err != nil {
		return trace.SpanContext{}
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true})
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

// TraceIDOf is the trace ID (hex) of a W3C traceparent; "" when it is not a
// valid one.
func TraceIDOf(traceparent string) string {
	if sc := SpanContextOf(traceparent); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}
