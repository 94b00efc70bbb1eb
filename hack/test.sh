#!/usr/bin/env bash
# Runs every test against real control planes. The tests get a private TMPDIR;
# whatever control-plane process is still running from it when the tests end
# (a test binary killed by a timeout cannot run its cleanups) is stopped, so a
# test run never leaves kube-apiserver or etcd behind.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
KUBEBUILDER_ASSETS=$(hack/toolchain.sh)
export KUBEBUILDER_ASSETS
run_dir=$(mktemp -d "${TMPDIR:-/tmp}/fleetdb-test.XXXXXX")
reap() {
	pkill -TERM -f -- "$run_dir" 2>/dev/null || true
	sleep 2
	pkill -KILL -f -- "$run_dir" 2>/dev/null || true
	rm -rf "$run_dir"
}
trap reap EXIT
# The real-node suite (test/realdb, docs/realnodes.md) needs root: run it
# wherever the tests run as root, unless FLEETDB_REAL_NODES=0 says otherwise.
if [ "$(id -u)" -eq 0 ]; then
	export FLEETDB_REAL_NODES="${FLEETDB_REAL_NODES:-1}"
fi
# Compile every test binary in parallel first, then run the packages one at a
# time: several sets of control planes at once overload a 2-core machine.
go vet ./...
TMPDIR=$run_dir go test -count=1 -p 1 -timeout "${TEST_TIMEOUT:-45m}" "$@" ./...
