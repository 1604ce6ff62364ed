#!/usr/bin/env bash
# scripts/confluent-python.sh — Confluent's official Python client, the
# reference eddy's Protobuf and JSON Schema serdes are checked against byte
# for byte (integration/interop): a virtual environment with confluent-kafka
# and the packages its serializers need, at pinned versions from PyPI, made
# once in $EDDY_CACHE and reused.
#
#   scripts/confluent-python.sh up    make the environment if missing
#   scripts/confluent-python.sh env   print EDDY_CONFLUENT_PYTHON=… for eval
set -euo pipefail
cache=${EDDY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/eddy}
pins="confluent-kafka==2.6.1 protobuf==4.25.9 jsonschema==4.26.0 requests==2.34.2"
venv="$cache/confluent-python-$(echo "$pins" | sha256sum | cut -c1-12)"

up() {
	if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c 'import confluent_kafka.schema_registry.protobuf, confluent_kafka.schema_registry.json_schema' 2>/dev/null; then
		return
	fi
	local python
	python=$(command -v python3) || { echo "confluent-python.sh: python3 is needed" >&2; exit 1; }
	rm -rf "$venv"
	mkdir -p "$cache"
	"$python" -m venv "$venv"
	# shellcheck disable=SC2086
	"$venv/bin/pip" install --quiet --disable-pip-version-check $pins
	echo "confluent-python.sh: made $venv ($pins)"
}

case ${1:-} in
up) up ;;
env) echo "export EDDY_CONFLUENT_PYTHON=$venv/bin/python" ;;
*) echo "usage: $0 up|env" >&2; exit 2 ;;
esac
