// ociimage writes an OCI image archive from a root file system folder, for
// `ctr images import` on the real-node fleet's nodes (no registry, no Docker).
// Standard library only; its own module so it builds without fleetdb's.
module github.com/fleetdb/fleetdb/test/tools/ociimage

go 1.26.0
