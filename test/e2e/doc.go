// Package e2e is fleetdb's end-to-end suite: the hub binary (or the hub
// Deployment) against a real fleet of a hub and member clusters.
//
// The suite is written the way Cluster API's test/framework is: every
// behaviour is a spec, func XSpec(ctx, XInput), built from helpers that take
// Input structs, so the same specs run against the project's local kwok fleet
// (the default: TestMain brings it up and tears it down), kind, or any
// existing fleet described by kubeconfigs. See README.md in this folder.
//
// The package's non-test files hold the specs (specs.go, failover.go, ...),
// the helpers (framework.go), the audit-log and hub-log readers (identity.go)
// and the watchdog (watchdog.go); the local fleet and the hub replicas come
// from test/localfleet, shared with the benchmark. e2e_test.go
// wires them into `go test`.
package e2e
