// Pins CloudNativePG, fleetdb's postgres backend in member clusters. The
// module is only downloaded, never built: tests and the local fleet take
// CloudNativePG's CRDs (config/crd/bases) from the module cache, and the
// kind fleet builds the operator's manifest from its config/ with kustomize.
// Kept out of the main module so CloudNativePG's dependency graph does not
// move fleetdb's.
module github.com/fleetdb/fleetdb/test/tools/cnpg

go 1.26.0

require github.com/cloudnative-pg/cloudnative-pg v1.28.0
