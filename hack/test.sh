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
timeout=${TEST_TIMEOUT:-45m}
go vet ./...
if [ $# -gt 0 ]; then
	# Arguments (a -run, a package) are go test's: one run, as asked.
	TMPDIR=$run_dir go test -count=1 -p 1 -timeout "$timeout" "$@" ./...
	exit
fi

# Compile every test binary in parallel first, then run the packages one at a
# time: several sets of control planes at once overload a 2-core machine.
# test/integration is the exception: its tests mostly wait on their control
# planes (one at a time leaves the machine about 70% idle), so its top-level
# tests run two at a time from one queue, the slowest first (the order only
# balances the two; a test missing from the list runs after them). The tests
# in `alone` run first, one at a time with nothing beside them: TestTopology
# restarts the hub at every step of a switchover, and beside another test the
# restarted hub's first report of a member took over two minutes in 3 of 6
# runs (2026-12-08), never when it ran alone.
integration=github.com/fleetdb/fleetdb/test/integration
alone=(TestTopology)
slow_first=(TestOnDemandBackup TestHub TestSafety TestFinalBackupHostile TestTombstones TestFinalBackup
	TestForbiddenHeals TestMemberJobTrustAtHubNames TestSwitchoverRaces TestRotation TestBurst TestPlacementKeepsPrimary)
mapfile -t others < <(go list ./... | grep -vx "$integration")
rc=0
TMPDIR=$run_dir go test -count=1 -p 1 -timeout "$timeout" "${others[@]}" || rc=1

go test -c -o "$run_dir/integration.test" ./test/integration || rc=1
mapfile -t listed < <(cd test/integration && "$run_dir/integration.test" -test.list '.*' | grep '^Test')
declare -A is_listed=() taken=()
for t in "${listed[@]}"; do is_listed[$t]=1; done
for t in "${alone[@]}"; do taken[$t]=1; done
queue=()
for t in "${slow_first[@]}" "${listed[@]}"; do
	if [ -n "${is_listed[$t]:-}" ] && [ -z "${taken[$t]:-}" ]; then
		queue+=("$t")
		taken[$t]=1
	fi
done
# run_integration_test runs one top-level test of test/integration and prints
# its output at once when it ends (the two runs' lines do not interleave),
# with go test's ok/FAIL line.
run_integration_test() {
	local start=$SECONDS out code=0
	out=$(cd test/integration && TMPDIR=$run_dir "$bin" -test.run "^$1\$" -test.count=1 -test.timeout "$timeout" 2>&1) || code=$?
	if [ "$code" -eq 0 ]; then
		printf 'ok  \t%s\t%s\t%ds\n' "$integration" "$1" $((SECONDS - start))
	else
		printf '%s\nFAIL\t%s\t%s\t%ds\n' "$out" "$integration" "$1" $((SECONDS - start))
	fi
	return "$code"
}
export -f run_integration_test
export run_dir timeout integration bin="$run_dir/integration.test"
start=$SECONDS
for t in "${alone[@]}"; do
	if [ -n "${is_listed[$t]:-}" ]; then
		run_integration_test "$t" || rc=1
	fi
done
printf '%s\n' "${queue[@]}" | xargs -P 2 -I{} bash -c 'run_integration_test "$1"' _ {} || rc=1
echo "test/integration: ${#alone[@]} alone, then ${#queue[@]} tests two at a time, in $((SECONDS - start))s"
exit "$rc"
