#!/usr/bin/env bash
# hack/run-tests.sh: the body of `make test`. Every package runs with `go test -json`
# against the real API server of KUBEBUILDER_ASSETS, and hack/testsummary reads the
# whole stream: failing tests' output, skips with reasons, a table per package, a
# failure when a required suite (test/required-suites.txt) ran nothing or skipped.
#
# test/nodeagent's VM suites boot real guests under TCG (minutes each on two cores) and
# were most of that package's time, serially after its other tests. They run in their
# own `go test` process, started first, beside the package's other tests and the rest of
# the module, so a fresh two-core machine finishes in the time of the longest part. Each
# process starts its own API server and agent (cgroups under a parent derived from its
# own state directory), so they do not meet. -run and -skip of one pattern partition the
# package: every test runs in exactly one of the two.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

: "${KUBEBUILDER_ASSETS:?set KUBEBUILDER_ASSETS (hack/build-control-plane.sh path)}"
flags=(-json -count=1 -timeout "${TEST_TIMEOUT:-45m}")
# shellcheck disable=SC2206 # TEST_FLAGS is a list of go test flags
extra=(${TEST_FLAGS:-})
vm='^(TestQEMUMicroVM|TestQEMUFullSystem|TestQEMUAgentCrash|TestQEMUHardwareVMNeverPlacedOnTCG|TestPoolVM|TestFullSystemManifest|TestSamplesThroughKStatus)'
na=sensorium.dev/workbench/test/nodeagent

out=bin/test-json
mkdir -p "$out"
rm -f "$out"/*.json
go build -o bin/testsummary ./hack/testsummary || exit 2
mapfile -t pkgs < <(go list ./... | grep -vxF "$na")

start=$SECONDS
run() { # run NAME ARGS...: one go test process, its stream into $out/NAME.json
	local name=$1
	shift
	go test "${flags[@]}" "${extra[@]}" "$@" >"$out/$name.json" 2>&1
	local rc=$?
	echo "make test: part $name ended (exit $rc) after $((SECONDS - start))s"
}
run nodeagent-vm "./test/nodeagent" -run "$vm" &
run nodeagent "./test/nodeagent" -skip "$vm" &
run module "${pkgs[@]}" &
wait

cat "$out"/nodeagent-vm.json "$out"/nodeagent.json "$out"/module.json | bin/testsummary -require test/required-suites.txt
