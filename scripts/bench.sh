#!/usr/bin/env bash
# scripts/bench.sh — what `make bench` runs: eddy's throughput benchmark
# (integration/cmd/eddybench) against the real broker of scripts/kafka.sh,
# started for the run if it is not running. Extra arguments go to
# eddybench (e.g. -records 300000 -only ceiling,stateless-eos).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CGO_ENABLED=1
if ! scripts/kafka.sh status >/dev/null 2>&1; then
	trap 'scripts/kafka.sh stop' EXIT
	scripts/kafka.sh start
fi
eval "$(scripts/kafka.sh env)"
cd integration
go run ./cmd/eddybench "$@"
