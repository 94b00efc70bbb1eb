// Pins CloudNativePG, fleetdb's postgres backend in member clusters. The
// module is only downloaded, never built: tests and the local fleet take
// CloudNativePG's CRDs (config/crd/bases) from the module cache, and the
// kind fleet installs the release manifest the module ships
// (releases/cnpg-<version>.yaml). v1.30.0, not v1.28.x: v1.28.0 can lose the
// demotion token of a switchover (fixed upstream by commit 5dbc6af14,
// "fix(replica): preserve the demotion token on no-change reconciles", in
// v1.28.4, v1.29.2 and v1.30.0), and the Go module proxy serves neither
// v1.28.4 nor a verifiable v1.29.2. docs/cloudnativepg.md says why.
// Kept out of the main module so CloudNativePG's dependency graph does not
// move fleetdb's.
module github.com/fleetdb/fleetdb/test/tools/cnpg

go 1.26.0

require github.com/cloudnative-pg/cloudnative-pg v1.30.0
