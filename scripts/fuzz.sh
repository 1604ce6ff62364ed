#!/usr/bin/env bash
# scripts/fuzz.sh — what `make fuzz` runs: every Go fuzz target of the
# workspace for FUZZTIME each (default 1m; the no-silent-loss issue's proof
# runs 10m). A finding is written by Go under the package's
# testdata/fuzz/<target>/ — commit it with the fix: `make test` runs every
# checked-in corpus entry (plain `go test` does).
#
# FUZZ narrows to targets whose name matches it (a grep pattern).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CGO_ENABLED=1
time=${FUZZTIME:-1m}
status=0
for m in $(go list -m -f '{{.Dir}}'); do
	for pkg in $(cd "$m" && go list ./... 2>/dev/null); do
		dir=$(cd "$m" && go list -f '{{.Dir}}' "$pkg")
		for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
			if [[ -n ${FUZZ:-} ]] && ! grep -q -- "$FUZZ" <<<"$target"; then continue; fi
			echo "== $pkg $target ($time)"
			(cd "$m" && go test -run '^$' -fuzz "^${target}\$" -fuzztime "$time" "$pkg") || status=1
		done
	done
done
exit $status
