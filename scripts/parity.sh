#!/usr/bin/env bash
# scripts/parity.sh [scenario…] — runs eddy's parity scenarios on Kafka
# Streams' own TopologyTestDriver (parity/, Kafka Streams 4.4.0) and rewrites
# the expected outputs in streams/streamstest/testdata/parity/*.out, which
# the Go parity tests compare eddy's test driver against. Needs Java 17 and
# Maven; jars come from Maven Central on first use.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root/parity"
mvn -q -B -Dstyle.color=never compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt
java -cp "target/classes:$(cat target/classpath.txt)" eddy.parity.Parity "$root/streams/streamstest/testdata/parity" "$@"
