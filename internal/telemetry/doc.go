// Package telemetry is the hub's observability plumbing: OpenTelemetry
// tracing set up from the standard OTEL_* variables, the span names and
// attributes fleetdb uses, the client transport that traces API calls, trace
// ids on log lines, and fleetdb's Prometheus metrics with their registration.
// What the spans and metrics say (plans, outcomes) is decided in hub.
package telemetry
