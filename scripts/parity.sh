#!/usr/bin/env bash
# scripts/parity.sh [scenario…] — runs eddy's parity scenarios on Kafka
# Streams' own TopologyTestDriver (parity/, Kafka Streams 4.4.0) and rewrites
# the expected outputs in streams/streamstest/testdata/parity/*.out, which
# the Go parity tests compare eddy's test driver against. Needs Java 17 and
# Maven; jars come from Maven Central on first use.
#
# Without arguments it also (re)writes the checked-in random inputs
# (<scenario>@<seed>, 2 seeds per scenario) and their expectations, then
# runs PARITY_SEEDS (default 200) random inputs per scenario in a scratch
# directory through both and reports every mismatch that is not one of the
# README's deliberate differences, naming its input file and the smallest
# input found that still shows it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
data="$root/streams/streamstest/testdata/parity"
cd "$root/parity"
mvn -q -B -Dstyle.color=never compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt
ks() { java -cp "target/classes:$(cat target/classpath.txt)" eddy.parity.Parity "$@"; }
ks "$data" "$@"
[[ $# -eq 0 ]] || exit 0

gen() { (cd "$root" && go test ./streams/streamstest -count=1 -run '^TestParityRandom$' "$@"); }
rm -f "$data"/*@*.in "$data"/*@*.out
gen -parity.gen "$data" -parity.seeds 2 >/dev/null
ks "$data" --random

scratch=${PARITY_DIR:-$(mktemp -d)}
mkdir -p "$scratch"
gen -parity.gen "$scratch" -parity.seeds "${PARITY_SEEDS:-200}" >/dev/null
ks "$scratch" --random
echo "parity: comparing eddy with Kafka Streams on the random inputs in $scratch"
# The first mismatches of each scenario are shrunk to the smallest input
# that still shows them (<input>.min.in), running Kafka Streams on each
# round's candidates.
ks_cmd="java -cp $root/parity/target/classes:$(cat target/classpath.txt) eddy.parity.Parity"
if gen -v -timeout 0 -parity.check "$scratch" -parity.ks "$ks_cmd" >"$scratch/check.log" 2>&1; then
	grep 'random scenarios compared' "$scratch/check.log" || true
	echo "parity: no mismatch"
else
	grep -v '^=== RUN\|^PASS$\|^FAIL$\|^ok\|^FAIL\s' "$scratch/check.log" | head -400
	echo "parity: mismatches (all in $scratch/check.log; inputs in $scratch)"
	exit 1
fi
