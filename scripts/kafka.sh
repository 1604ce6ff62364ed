#!/usr/bin/env bash
# scripts/kafka.sh — a real Apache Kafka broker and a real schema registry on
# 127.0.0.1 for eddy's tests, examples and benchmarks.
#
#   scripts/kafka.sh start    start both (no-op for one already running)
#   scripts/kafka.sh stop     stop exactly the processes this script started
#   scripts/kafka.sh status   exit 0 when both answer, 1 otherwise
#   scripts/kafka.sh env      print the export lines the tests read
#
# Kafka: Maven resolves org.apache.kafka:kafka_2.13 (scripts/kafka/pom.xml)
# from Maven Central; its runtime classpath is copied once into
# $EDDY_CACHE/kafka-<version>/libs, so later starts need no network and come
# up in seconds. The broker runs as ONE combined broker+controller (KRaft)
# with storage formatted in a fresh temporary directory, replication factors
# and min ISR of 1, and no initial rebalance delay.
#
# Schema registry: the AxonOps Schema Registry pinned in tools/go.mod, built
# once into $EDDY_CACHE/bin, run with in-memory storage and BACKWARD default
# compatibility.
#
# Settings (environment):
#   EDDY_KAFKA_PORT      broker port              (default 19092; controller uses port+1)
#   EDDY_REGISTRY_PORT   schema registry port     (default 18081)
#   EDDY_SERVICES_DIR    pids, logs and data      (default ${TMPDIR:-/tmp}/eddy-services-$UID)
#   EDDY_CACHE           jars and binaries        (default ${XDG_CACHE_HOME:-$HOME/.cache}/eddy)
#   EDDY_KAFKA_HEAP      broker JVM heap          (default 1g)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kafka_port=${EDDY_KAFKA_PORT:-19092}
controller_port=$((kafka_port + 1))
registry_port=${EDDY_REGISTRY_PORT:-18081}
services=${EDDY_SERVICES_DIR:-${TMPDIR:-/tmp}/eddy-services-$(id -u)}
cache=${EDDY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/eddy}
heap=${EDDY_KAFKA_HEAP:-1g}

kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$root/scripts/kafka/pom.xml")
registry_version=$(sed -n 's:^\s*github.com/axonops/axonops-schema-registry \(v[^ ]*\).*:\1:p' "$root/tools/go.mod")
libs=$cache/kafka-$kafka_version/libs
registry_bin=$cache/bin/schema-registry-$registry_version

log() { printf 'kafka.sh: %s\n' "$*" >&2; }

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

kafka_classpath() { echo "$libs/*"; }

# fetch_kafka puts the broker's runtime classpath into $libs, once.
fetch_kafka() {
	if [[ -f $libs/.complete ]]; then return; fi
	log "resolving Apache Kafka $kafka_version from Maven Central (first run only)"
	local tmp=$libs.tmp.$$
	rm -rf "$tmp"
	mkdir -p "$tmp"
	mvn -q -B -Dstyle.color=never -f "$root/scripts/kafka/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$tmp" >&2
	# kafka_2.13 brings slf4j-api 1.7 transitively; the log4j2 binding needs 2.x.
	find "$tmp" -name 'slf4j-api-1.*.jar' -delete
	touch "$tmp/.complete"
	rm -rf "$libs"
	mv "$tmp" "$libs"
}

# build_registry builds the pinned schema registry into $registry_bin, once.
build_registry() {
	if [[ -x $registry_bin ]]; then return; fi
	log "building schema registry $registry_version (first run only)"
	mkdir -p "$(dirname "$registry_bin")"
	(cd "$root/tools" && GOWORK=off go build -o "$registry_bin.tmp.$$" github.com/axonops/axonops-schema-registry/cmd/schema-registry)
	mv "$registry_bin.tmp.$$" "$registry_bin"
}

kafka_ready() {
	alive "$services/kafka.pid" && port_open "$kafka_port"
}

registry_ready() {
	alive "$services/registry.pid" &&
		curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$registry_port/subjects" 2>/dev/null
}

start_kafka() {
	if kafka_ready; then
		log "Kafka already running (pid $(cat "$services/kafka.pid"))"
		return
	fi
	if port_open "$kafka_port"; then
		log "port $kafka_port is in use by another process; set EDDY_KAFKA_PORT"
		exit 1
	fi
	fetch_kafka
	local data
	data=$(mktemp -d "${TMPDIR:-/tmp}/eddy-kafka-data.XXXXXX")
	echo "$data" >"$services/kafka.data"
	cat >"$data/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$kafka_port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$kafka_port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$data/logs
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
log.cleaner.backoff.ms=1000
EOF
	local java_opts=(-Xms256m "-Xmx$heap" -XX:+UseG1GC -Djava.awt.headless=true
		"-Dlog4j2.configurationFile=$root/scripts/kafka/log4j2.properties"
		"-Deddy.kafka.log=$services/kafka.log")
	java "${java_opts[@]}" -cp "$(kafka_classpath)" kafka.tools.StorageTool format \
		-t "$(java -cp "$(kafka_classpath)" kafka.tools.StorageTool random-uuid 2>/dev/null)" \
		-c "$data/server.properties" >"$services/kafka-format.log" 2>&1 ||
		{ cat "$services/kafka-format.log" >&2; exit 1; }
	nohup java "${java_opts[@]}" -cp "$(kafka_classpath)" kafka.Kafka "$data/server.properties" \
		>"$services/kafka.out" 2>&1 &
	echo $! >"$services/kafka.pid"
	log "Kafka $kafka_version starting (pid $!, log $services/kafka.log)"
	local i
	for i in $(seq 1 120); do
		if port_open "$kafka_port"; then break; fi
		if ! alive "$services/kafka.pid"; then
			log "Kafka exited; last lines of its log:"
			tail -n 30 "$services/kafka.out" "$services/kafka.log" >&2 2>/dev/null || true
			exit 1
		fi
		sleep 0.5
	done
	# The port answering is not enough: wait until a metadata request succeeds.
	if ! java -cp "$(kafka_classpath)" "-Dlog4j2.configurationFile=$root/scripts/kafka/log4j2.properties" \
		"-Deddy.kafka.log=$services/kafka-tools.log" \
		org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$kafka_port" --list \
		>/dev/null 2>"$services/kafka-tools.err"; then
		log "Kafka did not answer a metadata request:"
		cat "$services/kafka-tools.err" >&2
		exit 1
	fi
}

start_registry() {
	if registry_ready; then
		log "schema registry already running (pid $(cat "$services/registry.pid"))"
		return
	fi
	if port_open "$registry_port"; then
		log "port $registry_port is in use by another process; set EDDY_REGISTRY_PORT"
		exit 1
	fi
	build_registry
	SCHEMA_REGISTRY_HOST=127.0.0.1 SCHEMA_REGISTRY_PORT=$registry_port \
		SCHEMA_REGISTRY_STORAGE_TYPE=memory SCHEMA_REGISTRY_COMPATIBILITY_LEVEL=BACKWARD \
		nohup "$registry_bin" >"$services/registry.log" 2>&1 &
	echo $! >"$services/registry.pid"
	log "schema registry $registry_version starting (pid $!, log $services/registry.log)"
	local i
	for i in $(seq 1 60); do
		if registry_ready; then return; fi
		if ! alive "$services/registry.pid"; then
			log "schema registry exited:"
			tail -n 20 "$services/registry.log" >&2
			exit 1
		fi
		sleep 0.5
	done
	log "schema registry did not answer within 30s"
	exit 1
}

stop_one() {
	local name=$1 pidfile=$services/$1.pid
	if ! alive "$pidfile"; then
		rm -f "$pidfile"
		return
	fi
	local pid
	pid=$(cat "$pidfile")
	kill "$pid" 2>/dev/null || true
	local i
	for i in $(seq 1 60); do
		if ! kill -0 "$pid" 2>/dev/null; then break; fi
		sleep 0.5
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "$name (pid $pid) did not stop in 30s; killing it"
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile"
	log "$name stopped"
}

print_env() {
	echo "export EDDY_KAFKA_BOOTSTRAP=127.0.0.1:$kafka_port"
	echo "export EDDY_SCHEMA_REGISTRY_URL=http://127.0.0.1:$registry_port"
}

case ${1:-} in
start)
	mkdir -p "$services"
	start_kafka
	start_registry
	echo "Kafka bootstrap servers: 127.0.0.1:$kafka_port"
	echo "Schema registry URL:     http://127.0.0.1:$registry_port"
	;;
stop)
	stop_one registry
	stop_one kafka
	if [[ -f $services/kafka.data ]]; then
		rm -rf "$(cat "$services/kafka.data")" "$services/kafka.data"
	fi
	;;
status)
	ok=0
	if kafka_ready; then echo "Kafka: running on 127.0.0.1:$kafka_port (pid $(cat "$services/kafka.pid"), log $services/kafka.log)"; else echo "Kafka: not running"; ok=1; fi
	if registry_ready; then echo "schema registry: running on http://127.0.0.1:$registry_port (pid $(cat "$services/registry.pid"))"; else echo "schema registry: not running"; ok=1; fi
	exit $ok
	;;
env)
	print_env
	;;
*)
	echo "usage: $0 start|stop|status|env" >&2
	exit 2
	;;
esac
