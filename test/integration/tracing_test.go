package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/telemetry"
)

// TestTracing proves SPEC 5's tracing against a real OTLP/gRPC peer: the hub
// is configured by SetupTracing from OTEL_* variables only, exports to an
// in-process OTLP trace receiver, and one change (creating a Database on
// three members) becomes one trace: its Database.Reconcile span, one
// Member.Sync child per member, their API calls as client spans. The member
// StatefulSets carry that trace's traceparent, and the hub's log lines of the
// reconciles carry its trace id.
func TestTracing(t *testing.T) {
	recv := startOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+recv.addr)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME",
		"OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
		t.Setenv(k, "")
	}
	shutdown, err := telemetry.SetupTracing(context.Background(), "tracing-test")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	// Registered before the fleet, so it runs after the hub stopped.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			t.Errorf("flushing spans: %v", err)
		}
		telemetry.TracingOff()
	})

	logs := &syncBuffer{}
	e := startEnvWith(t, envOptions{logs: logs}, "m1", "m2", "m3")
	members := []string{"m1", "m2", "m3"}
	for _, m := range members {
		e.sim.enable(m, true)
	}
	g := NewWithT(t)
	ns := e.namespace("tracing")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "orders", members...))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "orders").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	db := e.getDB(ns, "orders")

	// Every member StatefulSet carries the traceparent of the change that wrote it: the same one.
	var traceparent string
	for _, m := range members {
		var sts appsv1.StatefulSet
		g.Expect(e.member(m).Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &sts)).To(Succeed())
		tp := sts.Annotations[fleetv1alpha1.AnnotationTraceparent]
		g.Expect(tp).To(MatchRegexp(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`), m)
		if traceparent == "" {
			traceparent = tp
		}
		g.Expect(tp).To(Equal(traceparent), "one change, one trace in every member")
	}
	parts := strings.Split(traceparent, "-")
	traceID, changeSpanID := parts[1], parts[2]

	// The change's trace as the receiver got it.
	var change *span
	// The member syncs in the change's trace, and the one that applied it, per member.
	syncSpans := map[string][]string{}
	syncSpan := map[string]*span{}
	g.Eventually(func(g Gomega) {
		spans := recv.trace(traceID)
		change = nil
		clear(syncSpans)
		for _, s := range spans {
			if s.name == telemetry.SpanDatabaseReconcile && s.spanID == changeSpanID {
				change = s
			}
		}
		g.Expect(change).NotTo(BeNil(), "the Database.Reconcile span the traceparent names")
		g.Expect(change.parentSpanID).To(BeEmpty(), "a reconcile is a root")
		g.Expect(change.attrs).To(HaveKeyWithValue(string(telemetry.AttrDatabaseNamespace), ns))
		g.Expect(change.attrs).To(HaveKeyWithValue(string(telemetry.AttrDatabaseName), "orders"))
		g.Expect(change.attrs).To(HaveKeyWithValue(string(telemetry.AttrDatabaseUID), string(db.UID)))
		g.Expect(change.attrs).To(HaveKeyWithValue(string(telemetry.AttrDatabaseGeneration), "1"))
		g.Expect(change.attrs).To(HaveKeyWithValue(string(telemetry.AttrMembersPlanned), "3"))
		g.Expect(change.attrs).To(HaveKeyWithValue(string(telemetry.AttrChange), "new"))
		// "requeue": the first reconcile holds its routine status (Pending,
		// Provisioning) for the status pace and comes back for it.
		g.Expect(change.attrs).To(HaveKeyWithValue(string(telemetry.AttrOutcome), BeElementOf("ok", "requeue")))
		g.Expect(change.attrs).To(HaveKey(string(telemetry.AttrReconcileID)))
		g.Expect(change.resource).To(HaveKeyWithValue("service.name", telemetry.DefaultServiceName))
		g.Expect(change.resource).To(HaveKeyWithValue("service.version", "tracing-test"))
		g.Expect(change.resource).To(HaveKey("service.instance.id"))

		for _, m := range members {
			var synced []*span
			for _, s := range spans {
				if s.name != telemetry.SpanMemberSync || s.attrs[string(telemetry.AttrCluster)] != m {
					continue
				}
				g.Expect(s.parentSpanID).To(Equal(changeSpanID), "%s: a member sync of the change is a child of its reconcile", m)
				syncSpans[m] = append(syncSpans[m], s.spanID)
				if s.attrs[string(telemetry.AttrOutcome)] == "synced" {
					synced = append(synced, s)
				}
			}
			g.Expect(synced).To(HaveLen(1), "%s: one sync carried the change out", m)
			s := synced[0]
			g.Expect(s.attrs).To(HaveKeyWithValue(string(telemetry.AttrDatabaseNamespace), ns))
			g.Expect(s.attrs).To(HaveKeyWithValue(string(telemetry.AttrDatabaseName), "orders"))
			g.Expect(s.attrs).To(HaveKeyWithValue(string(telemetry.AttrDatabaseGeneration), "1"))
			g.Expect(s.attrs).To(HaveKeyWithValue(string(telemetry.AttrRole), "apply"))
			g.Expect(s.attrs).To(HaveKeyWithValue(string(telemetry.AttrObjectsRestored), "0"))
			g.Expect(s.attrs).To(HaveKeyWithValue(string(telemetry.AttrObjectsApplied), "7"), "%s: namespace, credentials and instance TLS secrets, configmap, 2 services, statefulset (one instance: no pdb)", m)
			g.Expect(s.statusError).To(BeFalse())
			syncSpan[m] = s

			// Its API calls to the member are client spans under it.
			var calls []string
			for _, c := range spans {
				if c.parentSpanID == s.spanID && c.kind == tracepb.Span_SPAN_KIND_CLIENT {
					g.Expect(c.attrs).To(HaveKeyWithValue(string(telemetry.AttrCluster), m))
					calls = append(calls, c.name)
				}
			}
			g.Expect(calls).To(ContainElement("PATCH statefulsets"), m)
		}
		// The reconcile's own hub calls too.
		var hubCalls []string
		for _, c := range spans {
			if c.parentSpanID == changeSpanID && c.kind == tracepb.Span_SPAN_KIND_CLIENT {
				hubCalls = append(hubCalls, c.name)
			}
		}
		// The finalizer; the status goes out with the status pace, in this
		// reconcile or a later pass over the same change (below).
		g.Expect(hubCalls).To(ContainElement("PATCH databases"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Later passes over the same change (member readiness reports) are
	// their own traces, linked to the change.
	g.Eventually(func(g Gomega) {
		var linkedSyncs, linkedReconciles int
		for _, s := range recv.all() {
			if s.traceID == traceID || !s.linksTo(traceID, changeSpanID) {
				continue
			}
			switch s.name {
			case telemetry.SpanMemberSync:
				linkedSyncs++
			case telemetry.SpanDatabaseReconcile:
				g.Expect(s.attrs).To(HaveKeyWithValue(string(telemetry.AttrChange), "continued"))
				linkedReconciles++
			}
		}
		g.Expect(linkedSyncs).To(BeNumerically(">", 0))
		g.Expect(linkedReconciles).To(BeNumerically(">", 0))
		// The change's status write: in its own reconcile or a linked pass.
		var statusWrites int
		for _, s := range recv.all() {
			if s.name != "PATCH databases/status" || s.kind != tracepb.Span_SPAN_KIND_CLIENT {
				continue
			}
			for _, r := range recv.all() {
				if r.spanID == s.parentSpanID && r.name == telemetry.SpanDatabaseReconcile &&
					(r.spanID == changeSpanID || r.linksTo(traceID, changeSpanID)) {
					statusWrites++
				}
			}
		}
		g.Expect(statusWrites).To(BeNumerically(">", 0), "the change's status was written by its reconcile or a pass linked to it")
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// The hub's log lines of those reconciles carry the trace.
	lines := logs.jsonLines(t)
	// Passes over the same change linked to it (the status pace writes the
	// first status in one of them): their trace id → span id.
	linkedPass := map[string]string{}
	for _, s := range recv.all() {
		if s.name == telemetry.SpanDatabaseReconcile && s.traceID != traceID && s.linksTo(traceID, changeSpanID) {
			linkedPass[s.traceID] = s.spanID
		}
	}
	var reconcileLines, syncLines int
	for _, l := range lines {
		if id, _ := l["traceID"].(string); id != traceID {
			if span, ok := linkedPass[id]; ok && l["controller"] == "database" {
				g.Expect(l).To(HaveKeyWithValue("database", ns+"/orders"))
				g.Expect(l).To(HaveKeyWithValue("spanID", span), "%v", l)
				reconcileLines++
			}
			continue
		}
		g.Expect(l).To(HaveKeyWithValue("database", ns+"/orders"))
		g.Expect(l).To(HaveKey("reconcileID"))
		switch l["controller"] {
		case "database":
			g.Expect(l).To(HaveKeyWithValue("spanID", changeSpanID), "%v", l)
			reconcileLines++
		case "member-sync":
			m, _ := l["cluster"].(string)
			g.Expect(syncSpans[m]).To(ContainElement(l["spanID"]), "%v", l)
			if l["msg"] == "applied member objects" {
				g.Expect(l).To(HaveKeyWithValue("spanID", syncSpan[m].spanID), "%v", l)
				syncLines++
			}
		}
	}
	g.Expect(reconcileLines).To(BeNumerically(">", 0), "the change's reconcile, or a pass linked to it, logged its status write")
	g.Expect(syncLines).To(Equal(len(members)), "every member's apply is logged in the change's trace")
	// No reconcile line without its trace (controller-runtime's own
	// "Reconciler error" line included: it has the reconcileID).
	for _, l := range lines {
		if _, ok := l["reconcileID"]; !ok {
			continue
		}
		if c := l["controller"]; c != "database" && c != "member-sync" {
			continue
		}
		g.Expect(l).To(HaveKey("traceID"), "%v", l)
		g.Expect(l).To(HaveKey("spanID"), "%v", l)
		g.Expect(l).To(HaveKey("database"), "%v", l)
		if l["controller"] == "member-sync" {
			g.Expect(l).To(HaveKey("cluster"), "%v", l)
		}
	}
}

// otlpReceiver is an OTLP/gRPC trace receiver: the peer a collector would be.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []*span
}

// span is a received span with its attributes as strings.
type span struct {
	name, traceID, spanID, parentSpanID string
	kind                                tracepb.Span_SpanKind
	attrs, resource                     map[string]string
	links                               [][2]string
	statusError                         bool
}

func (s *span) linksTo(traceID, spanID string) bool {
	for _, l := range s.links {
		if l[0] == traceID && l[1] == spanID {
			return true
		}
	}
	return false
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	r := &otlpReceiver{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return r
}

// Export implements coltracepb.TraceServiceServer.
func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				out := &span{
					name: s.GetName(), kind: s.GetKind(),
					traceID: hex.EncodeToString(s.GetTraceId()), spanID: hex.EncodeToString(s.GetSpanId()),
					parentSpanID: hex.EncodeToString(s.GetParentSpanId()),
					attrs:        attrMap(s.GetAttributes()), resource: res,
					statusError: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
				}
				for _, l := range s.GetLinks() {
					out.links = append(out.links, [2]string{hex.EncodeToString(l.GetTraceId()), hex.EncodeToString(l.GetSpanId())})
				}
				r.spans = append(r.spans, out)
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) all() []*span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*span(nil), r.spans...)
}

func (r *otlpReceiver) trace(traceID string) []*span {
	var out []*span
	for _, s := range r.all() {
		if s.traceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(v.GetBoolValue())
		default:
			m[kv.GetKey()] = v.GetStringValue()
		}
	}
	return m
}

// syncBuffer collects log output written from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// jsonLines parses the collected JSON log lines; every line must be JSON.
func (b *syncBuffer) jsonLines(t *testing.T) []map[string]any {
	b.mu.Lock()
	data := append([]byte(nil), b.buf.Bytes()...)
	b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<24)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// TestTracingOffLogs proves the logging contract of a hub that exports no
// traces (no OTEL_EXPORTER_OTLP_* endpoint): its spans still have real ids,
// so every log line of a reconcile (the Database reconcile, the member
// syncs, the DatabaseBackup controller, and controller-runtime's own
// "Reconciler error" line) carries a traceID, and the member objects carry
// the change's (unsampled) traceparent, whose trace id the hub's lines of
// that change carry.
func TestTracingOffLogs(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
		t.Setenv(k, "")
	}
	shutdown, err := telemetry.SetupTracing(context.Background(), "tracing-off-test")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = shutdown(context.Background()) })

	logs := &syncBuffer{}
	e := startEnvWith(t, envOptions{logs: logs}, "m1")
	e.sim.enable("m1", true)
	g := NewWithT(t)
	ns := e.namespace("tracing-off")
	g.Expect(e.hub.Create(e.ctx, newDB(ns, "orders", "m1"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getDB(ns, "orders").Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	var sts appsv1.StatefulSet
	g.Expect(e.member("m1").Get(e.ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &sts)).To(Succeed())
	tp := sts.Annotations[fleetv1alpha1.AnnotationTraceparent]
	g.Expect(tp).To(MatchRegexp(`^00-[0-9a-f]{32}-[0-9a-f]{16}-00$`), "a real, unsampled traceparent")
	traceID := strings.Split(tp, "-")[1]
	g.Expect(e.getDB(ns, "orders").Status.LastChangeTraceID).To(Equal(traceID),
		"status.lastChangeTraceID is the trace the member objects of the change carry")

	// A Database in a protected namespace stalls: a terminal error, which
	// controller-runtime logs as "Reconciler error".
	g.Expect(e.hub.Create(e.ctx, newDB("kube-system", "stalls", "m1"))).To(Succeed())
	// A DatabaseBackup's reconciles: created (its Database is missing), deleted.
	b := newBackup(ns, "nightly", "missing", fleetv1alpha1.BackupDeletionRetain)
	g.Expect(e.hub.Create(e.ctx, b)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.getBackup(g, ns, "nightly").Finalizers).NotTo(BeEmpty())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(e.hub.Delete(e.ctx, b)).To(Succeed())
	e.waitBackupGone(g, ns, "nightly")

	g.Eventually(func(g Gomega) {
		perController := map[string]int{}
		var errorLines, changeLines int
		for _, l := range logs.jsonLines(t) {
			if _, ok := l["reconcileID"]; !ok {
				continue // not a reconcile's line (start-up, sources)
			}
			g.Expect(l["traceID"]).To(MatchRegexp(`^[0-9a-f]{32}$`), "%v", l)
			g.Expect(l["traceID"]).NotTo(Equal("00000000000000000000000000000000"), "%v", l)
			g.Expect(l["spanID"]).To(MatchRegexp(`^[0-9a-f]{16}$`), "%v", l)
			c, _ := l["controller"].(string)
			perController[c]++
			if l["msg"] == "Reconciler error" && c == "database" {
				errorLines++
			}
			if l["traceID"] == traceID {
				changeLines++
			}
		}
		g.Expect(errorLines).To(BeNumerically(">", 0), "the stalled Database's Reconciler error line")
		g.Expect(changeLines).To(BeNumerically(">", 0), "the change's lines carry the member objects' trace id")
		g.Expect(perController).To(HaveKey("database"))
		g.Expect(perController).To(HaveKey("member-sync"))
		g.Expect(perController).To(HaveKey("databasebackup"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}
