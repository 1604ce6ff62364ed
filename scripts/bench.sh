#!/usr/bin/env bash
# scripts/bench.sh — what `make bench` runs: eddy (on franz-go, and built
# with -tags eddy_librdkafka) against Kafka Streams (bench/kstreams, built
# here with Maven) and plain client loops on both clients, on the real
# broker of scripts/kafka.sh, started for the run if it is not running
# (integration/cmd/eddybench). It draws the run into docs/bench.svg.
# Extra arguments go to eddybench (e.g. -only stateless,latency -scale 0.3
# -guarantees exactly_once).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CGO_ENABLED=1
if ! scripts/kafka.sh status >/dev/null 2>&1; then
	trap '"$root/scripts/kafka.sh" stop' EXIT
	scripts/kafka.sh start
fi
eval "$(scripts/kafka.sh env)"
# Kafka Streams' side of the benchmark (bench/kstreams), built with Maven.
(cd bench/kstreams && mvn -q -B -Dstyle.color=never compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt)
cp="$root/bench/kstreams/target/classes:$(cat bench/kstreams/target/classpath.txt)"
cd integration
go build -o "${TMPDIR:-/tmp}/eddybench" ./cmd/eddybench
go build -tags eddy_librdkafka -o "${TMPDIR:-/tmp}/eddybench-librdkafka" ./cmd/eddybench
"${TMPDIR:-/tmp}/eddybench" -kstreams-classpath "$cp" -librdkafka-bin "${TMPDIR:-/tmp}/eddybench-librdkafka" \
	-svg "$root/docs/bench.svg" "$@"
