#!/usr/bin/env bash
# scripts/test.sh — what `make test` runs: formatting and vet checks, then
# `go test -race` over every module of the workspace against a real Kafka
# broker and schema registry. Services already running (scripts/kafka.sh
# status) are used as they are; services this script starts are stopped when
# it exits, also when a test fails.
#
# EDDY_TEST_FLAGS adds flags to every `go test` (e.g. -run, -v, -count=1).
#
# The container tests (integration/kafkatest's own, and the example
# service's integration test in examples/ordertotals) start Kafka and the
# schema registry in containers through testcontainers-go, on the engine and
# images scripts/containers.sh makes (installed and built on first use,
# reused after); the rest of the suite uses the shared broker above. After
# the run no container a test of this run started may be left (containers
# carry the run's id, EDDY_TEST_RUN), and the host's firewall
# rules and forwarding setting must be as they were.
#
# Three passes: pure Go (every module builds with CGO_ENABLED=0 and no C
# compiler); the suite on eddy's own client (franz-go, the default build),
# with the race detector (which needs cgo); and a second, short pass with
# the eddy_librdkafka build tag (confluent-kafka-go): its client's unit
# tests, the exactly-once crash tests and the secured-cluster tests.
#
# `scripts/test.sh chaos` (make chaos) runs the long broker-fault tests
# instead: brokers of their own SIGKILLed and restarted, a 3-node cluster
# losing its leader, an outage longer than the transaction timeout, and the
# SIGKILL loops of the at-least-once, async, deduplication and
# crash-during-restore apps, a 30 s stall of an async operator's service, and
# the rolling upgrade from the previous release (which builds it). make test
# leaves them out (they take minutes of waiting out outages, stalls and
# restarts) but keeps the exactly-once SIGKILL loop on both clients; .ci/run
# runs both.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CGO_ENABLED=1
mode=${1:-test}
chaos_tests='^(TestBrokerRestartsExactlyOnce|TestBrokerRestartsAtLeastOnce|TestBrokerDownLongerThanTransactionTimeout|TestLeaderFailoverInThreeBrokerCluster|TestAtLeastOnceUnderCrashes|TestAsyncExactlyOnceUnderCrashes|TestDeduplicateUnderCrashes|TestCrashDuringRestoreRestoresExactly|TestAsyncStallKeepsMemoryBounded|TestRollingUpgradeFromThePreviousRelease)$'

started=0
containers_started=0
cleanup() {
	if [[ $containers_started == 1 ]]; then scripts/containers.sh down; fi
	if [[ $started == 1 ]]; then scripts/kafka.sh stop; fi
}
trap cleanup EXIT
if ! scripts/kafka.sh status >/dev/null 2>&1; then
	started=1
	scripts/kafka.sh start
fi
net_before=$(scripts/containers.sh netstate)
if [[ $mode == chaos ]]; then
	eval "$(scripts/kafka.sh env)"
	export EDDY_REQUIRE_REAL_SERVICES=1
	echo "== go test -race: the broker-fault tests"
	(cd integration && go test -race -count=1 -v -timeout 30m ${EDDY_TEST_FLAGS:-} -run "$chaos_tests" .)
	exit
fi
if ! scripts/containers.sh status >/dev/null 2>&1; then containers_started=1; fi
scripts/containers.sh up
# This run's id, which kafkatest puts on every container it starts: the check
# at the end counts only this run's containers, and those of an earlier run
# that was killed before it could remove them are removed now.
EDDY_TEST_RUN=$(scripts/containers.sh run-id $$)
export EDDY_TEST_RUN
scripts/containers.sh reap
scripts/confluent-python.sh up
eval "$(scripts/kafka.sh env)"
eval "$(scripts/containers.sh env)"
eval "$(scripts/confluent-python.sh env)"
export EDDY_REQUIRE_REAL_SERVICES=1
[[ $started == 1 ]] || echo "test.sh: using the services already running"

# Every workspace module that holds packages.
modules=
for m in $(go list -m -f '{{.Dir}}'); do
	if [[ -n $(cd "$m" && go list ./... 2>/dev/null) ]]; then modules+=" $m"; fi
done

echo "== gofmt"
unformatted=$(gofmt -l $modules)
if [[ -n $unformatted ]]; then
	echo "gofmt would change these files:" >&2
	echo "$unformatted" >&2
	exit 1
fi

echo "== go vet (both client backends)"
for m in $modules; do
	(cd "$m" && go vet ./... && go vet -tags eddy_librdkafka ./...)
done

echo "== pure Go: CGO_ENABLED=0, no C compiler"
for m in $modules; do
	(cd "$m" && CGO_ENABLED=0 CC=/nonexistent/cc go build ./...)
done
CGO_ENABLED=0 CC=/nonexistent/cc go test ./topology/... ./streams/streamstest/... >/dev/null

echo "== go test -race"
status=0
for m in $modules; do
	# The integration tests prove behaviour against the services, which Go's
	# test cache cannot see: never take their results from the cache.
	# -v there too: the fault tests log where each fault struck ("SIGKILL of
	# p1 at 41% of input committed").
	# Its fault tests take a while: a generous -timeout (the default is 10m).
	fresh=()
	[ "$(basename "$m")" = integration ] && fresh=(-count=1 -v -timeout 45m -skip "$chaos_tests")
	(cd "$m" && go test -race "${fresh[@]}" ${EDDY_TEST_FLAGS:-} ./...) || status=1
done

echo "== go test -race -tags eddy_librdkafka (the librdkafka backend)"
go test -race -tags eddy_librdkafka ${EDDY_TEST_FLAGS:-} ./internal/kclient/... || status=1
(cd integration && go test -race -tags eddy_librdkafka -count=1 -v -timeout 20m ${EDDY_TEST_FLAGS:-} \
	-run 'TestExactlyOnceUnderCrashes|TestSecure' .) || status=1
echo "== container tests: the example service's own integration test, Kafka and the registry in containers"
(cd examples && env -u EDDY_KAFKA_BOOTSTRAP -u EDDY_SCHEMA_REGISTRY_URL \
	go test -race -count=1 -v ${EDDY_TEST_FLAGS:-} -run '^(TestOrderTotals|TestAKilledTestLeavesNoContainersBehind)' ./ordertotals/) || status=1

echo "== nothing left behind"
left=$(scripts/containers.sh leftovers "$EDDY_TEST_RUN")
if [[ -n $left ]]; then
	echo "containers started by tests are still there:" >&2
	echo "$left" >&2
	status=1
fi
if [[ $(scripts/containers.sh netstate) != "$net_before" ]]; then
	echo "the host's firewall rules or forwarding setting changed during the run:" >&2
	diff <(echo "$net_before") <(scripts/containers.sh netstate) >&2 || true
	status=1
fi
exit $status
