package telemetry

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Transport wraps a hub or member transport so that every API call made
// inside a traced reconcile becomes a client span (named by method and
// resource, e.g. "PATCH statefulsets", with fleetdb.cluster) and carries the
// traceparent header. Calls outside a recording span (informers' list and
// watch, health probes) pass straight through: they would only be noise,
// one root trace per watch or probe.
//
// cluster is the member's name, "" for the hub.
func Transport(cluster string, rt http.RoundTripper) http.RoundTripper {
	opts := []otelhttp.Option{
		otelhttp.WithFilter(func(r *http.Request) bool { return trace.SpanFromContext(r.Context()).IsRecording() }),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + apiResource(r.URL.Path) }),
		otelhttp.WithPropagators(propagation.TraceContext{}),
	}
	if cluster != "" {
		opts = append(opts, otelhttp.WithSpanOptions(trace.WithAttributes(AttrCluster.String(cluster))))
	}
	return otelhttp.NewTransport(rt, opts...)
}

// apiResource names the resource of a Kubernetes API path, with its
// subresource: /apis/apps/v1/namespaces/a/statefulsets/b/status gives
// "statefulsets/status". Span names stay low-cardinality: no object names.
func apiResource(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return path
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return path
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}
