#!/usr/bin/env bash
# scripts/kafka.sh — a real Apache Kafka broker (or cluster) and a real schema
# registry on 127.0.0.1 for eddy's tests, examples and benchmarks.
#
#   scripts/kafka.sh start [kafka|registry]  start both, or one (no-op for one already running)
#   scripts/kafka.sh stop                    stop exactly the processes this script started
#   scripts/kafka.sh status                  exit 0 when what was started answers, 1 otherwise
#   scripts/kafka.sh env                     print the export lines the tests read
#   scripts/kafka.sh kill NODE               SIGKILL broker NODE (1…N); its data stays
#   scripts/kafka.sh restart NODE            start broker NODE again on its data
#   scripts/kafka.sh leader TOPIC PARTITION  print the node id leading a partition
#   scripts/kafka.sh fetch                   resolve the broker's jars and build the registry (no start);
#                                            prints "libs DIR" and "registry BINARY" (scripts/containers.sh
#                                            puts both into its images)
#
# Kafka: Maven resolves org.apache.kafka:kafka_2.13 (scripts/kafka/pom.xml)
# from Maven Central; its runtime classpath is copied once into
# $EDDY_CACHE/kafka-<version>/libs, so later starts need no network and come
# up in seconds. Each node is a combined broker+controller (KRaft) with its
# storage formatted in a fresh directory at start (kept across kill and
# restart, removed at stop). One node by default, with replication factors
# and min ISR of 1; EDDY_KAFKA_NODES=3 starts a 3-node cluster with
# replication factor 3 and min.insync.replicas 2 (topics, the offsets topic
# and the transaction log), for fault tests. EDDY_KAFKA_CONTROLLER=dedicated
# runs the KRaft controller as a process of its own (node id 100, on the port
# after the first broker's) and the nodes as brokers only, as production
# clusters do: a broker SIGKILLed and restarted then finds a controller that
# fenced it meanwhile. (A combined single node restarted after SIGKILL serves
# as coordinator from its old registration until its own controller fences
# it ~9 s later; transaction markers it sends in that window are dropped for
# want of a leader, leaving hanging transactions: seen in the broker-restart
# tests.)
#
# Schema registry: the AxonOps Schema Registry pinned in tools/go.mod, built
# once into $EDDY_CACHE/bin, run with in-memory storage and BACKWARD default
# compatibility.
#
# Security (EDDY_KAFKA_SECURE=1, the default): every node also has a SASL_SSL
# listener (SCRAM-SHA-512 and PLAIN) on port base+2N+(n-1) (19094 for the
# single default node), with a certificate for 127.0.0.1 signed by a
# throwaway CA generated at start (openssl; nothing secret is committed), and
# the KRaft StandardAuthorizer with allow.everyone.if.no.acl.found=false.
# Principals on SASL_SSL get only what ACLs grant them; the super users are
# User:admin (a SCRAM user whose password is generated at start) and
# User:ANONYMOUS, the principal of the PLAINTEXT listener, which stays open
# for the rest of the suite. A second schema registry serves HTTPS with basic
# auth on the port after the plain one (user eddy, password generated at
# start). The CA certificate and the passwords are files in
# $EDDY_SERVICES_DIR/secure (mode 0600) that `env` names; they are never
# printed.
#
# Settings (environment):
#   EDDY_KAFKA_VERSION   Apache Kafka release     (default: scripts/kafka/pom.xml's, 4.4.0)
#   EDDY_KAFKA_NODES     cluster size             (default 1)
#   EDDY_KAFKA_CONTROLLER combined | dedicated    (default combined)
#   EDDY_KAFKA_PORT      first broker port        (default 19092; node i listens on port+2(i-1),
#                                                  its controller on the port after)
#   EDDY_REGISTRY_PORT   schema registry port     (default 18081)
#   EDDY_SERVICES_DIR    pids, logs and data      (default ${TMPDIR:-/tmp}/eddy-services-$UID)
#   EDDY_CACHE           jars and binaries        (default ${XDG_CACHE_HOME:-$HOME/.cache}/eddy)
#   EDDY_KAFKA_HEAP      heap of each broker JVM  (default 1g; 512m per node in a cluster)
#   EDDY_KAFKA_SECURE    1: also SASL_SSL, ACLs and the secured registry; 0: plaintext only (default 1)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
base_port=${EDDY_KAFKA_PORT:-19092}
registry_port=${EDDY_REGISTRY_PORT:-18081}
services=${EDDY_SERVICES_DIR:-${TMPDIR:-/tmp}/eddy-services-$(id -u)}
cache=${EDDY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/eddy}

pom_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$root/scripts/kafka/pom.xml")
kafka_version=${EDDY_KAFKA_VERSION:-$pom_version}
registry_version=$(sed -n 's:^\s*github.com/axonops/axonops-schema-registry \(v[^ ]*\).*:\1:p' "$root/tools/go.mod")
libs=$cache/kafka-$kafka_version/libs
secure_dir=$services/secure
secure_registry_port=$((registry_port + 1))
# Static (CGO_ENABLED=0): the same binary runs here and in the registry image.
registry_bin=$cache/bin/schema-registry-$registry_version-static

log() { printf 'kafka.sh: %s\n' "$*" >&2; }

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The cluster's size: what was started (recorded), else the setting.
nodes() {
	if [[ -f $services/kafka.nodes ]]; then cat "$services/kafka.nodes"; else echo "${EDDY_KAFKA_NODES:-1}"; fi
}
# Whether the controller runs on its own: what was started (recorded), else
# the setting.
dedicated() {
	if [[ -f $services/kafka.nodes ]]; then [[ -f $services/kafka.controller ]]; else [[ ${EDDY_KAFKA_CONTROLLER:-combined} == dedicated ]]; fi
}
controller_id=100
broker_port() { echo $((base_port + 2 * ($1 - 1))); }
controller_port() { echo $((base_port + 2 * ($1 - 1) + 1)); }
# Whether the SASL_SSL listener and the authorizer are on: what was started
# (recorded), else the setting.
secure() {
	if [[ -f $services/kafka.nodes ]]; then [[ -f $services/kafka.secure ]]; else [[ ${EDDY_KAFKA_SECURE:-1} == 1 ]]; fi
}
sasl_port() { echo $((base_port + 2 * $(nodes) + $1 - 1)); }
pidfile() { echo "$services/kafka-$1.pid"; }
datadir() { echo "$services/kafka-data/node-$1"; }

bootstrap() {
	local n out=
	for n in $(seq 1 "$(nodes)"); do out+=${out:+,}127.0.0.1:$(broker_port "$n"); done
	echo "$out"
}

sasl_bootstrap() {
	local n out=
	for n in $(seq 1 "$(nodes)"); do out+=${out:+,}127.0.0.1:$(sasl_port "$n"); done
	echo "$out"
}

# password prints a fresh random password.
password() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# make_secrets generates, in $secure_dir, a throwaway CA, a certificate for
# 127.0.0.1 and localhost signed by it (the broker's and the secured
# registry's), and the admin and registry passwords.
make_secrets() {
	rm -rf "$secure_dir"
	mkdir -p "$secure_dir"
	chmod 700 "$secure_dir"
	(
		cd "$secure_dir"
		umask 077
		openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj "/CN=eddy test CA" \
			-keyout ca.key -out ca.pem 2>/dev/null
		openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr 2>/dev/null
		printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
		openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 7 \
			-extfile server.ext -out server.pem 2>/dev/null
		# Kafka's PEM keystore: the PKCS#8 key, then the certificate chain.
		openssl pkcs8 -topk8 -nocrypt -in server.key -out server.pk8
		cat server.pk8 server.pem ca.pem >broker-keystore.pem
		rm -f server.csr server.ext ca.srl ca.key
		password >admin.password
		password >registry.password
		echo eddy >registry.user
	) || { log "generating the test CA and certificates with openssl failed"; exit 1; }
}

kafka_classpath() { echo "$libs/*"; }

# fetch_kafka puts the broker's runtime classpath into $libs, once.
fetch_kafka() {
	if [[ -f $libs/.complete ]]; then return; fi
	log "resolving Apache Kafka $kafka_version from Maven Central (first run only)"
	local tmp=$libs.tmp.$$
	rm -rf "$tmp"
	mkdir -p "$tmp"
	mvn -q -B -Dstyle.color=never -f "$root/scripts/kafka/pom.xml" dependency:copy-dependencies \
		-Dkafka.version="$kafka_version" -DincludeScope=runtime -DoutputDirectory="$tmp" >&2
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
	(cd "$root/tools" && GOWORK=off CGO_ENABLED=0 go build -o "$registry_bin.tmp.$$" github.com/axonops/axonops-schema-registry/cmd/schema-registry)
	mv "$registry_bin.tmp.$$" "$registry_bin"
}

node_ready() { alive "$(pidfile "$1")" && port_open "$(broker_port "$1")"; }

kafka_ready() {
	local n
	[[ -f $services/kafka.nodes ]] || return 1
	if dedicated; then alive "$(pidfile c)" || return 1; fi
	for n in $(seq 1 "$(nodes)"); do node_ready "$n" || return 1; done
}

registry_ready() {
	alive "$services/registry.pid" &&
		curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$registry_port/subjects" 2>/dev/null
}

java_opts() {
	local heap=${EDDY_KAFKA_HEAP:-1g}
	[[ $(nodes) -gt 1 && -z ${EDDY_KAFKA_HEAP:-} ]] && heap=512m
	echo -Xms128m "-Xmx$heap" -XX:+UseG1GC -Djava.awt.headless=true \
		"-Dlog4j2.configurationFile=$root/scripts/kafka/log4j2.properties" "-Deddy.kafka.log=$services/kafka-$1.log"
}

# write_config writes node n's server.properties into its data directory.
write_config() {
	local n=$1 count data voters= i rf=1 isr=1
	count=$(nodes)
	data=$(datadir "$n")
	local roles id listeners advertised=
	if [[ $n == c ]]; then
		roles=controller id=$controller_id listeners="CONTROLLER://127.0.0.1:$(controller_port 1)"
	else
		advertised="advertised.listeners=PLAINTEXT://127.0.0.1:$(broker_port "$n")"
		roles=broker,controller id=$n
		listeners="PLAINTEXT://127.0.0.1:$(broker_port "$n"),CONTROLLER://127.0.0.1:$(controller_port "$n")"
		if dedicated; then roles=broker listeners="PLAINTEXT://127.0.0.1:$(broker_port "$n")"; fi
	fi
	if dedicated; then
		voters=$controller_id@127.0.0.1:$(controller_port 1)
	else
		for i in $(seq 1 "$count"); do voters+=${voters:+,}$i@127.0.0.1:$(controller_port "$i"); done
	fi
	if [[ $count -gt 1 ]]; then rf=3 isr=2; fi
	local protocols=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
	if secure && [[ $n != c ]]; then
		listeners+=",SASL_SSL://127.0.0.1:$(sasl_port "$n")"
		advertised+=",SASL_SSL://127.0.0.1:$(sasl_port "$n")"
		protocols+=",SASL_SSL:SASL_SSL"
	fi
	mkdir -p "$data"
	cat >"$data/server.properties" <<EOF
process.roles=$roles
node.id=$id
controller.quorum.voters=$voters
listeners=$listeners
$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
log.dirs=$data/logs
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
log.cleaner.backoff.ms=1000
EOF
	if secure; then
		cat >>"$data/server.properties" <<EOF
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:ANONYMOUS
EOF
	fi
	if secure && [[ $n != c ]]; then
		cat >>"$data/server.properties" <<EOF
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="$(cat "$secure_dir/admin.password")";
ssl.keystore.type=PEM
ssl.keystore.location=$secure_dir/broker-keystore.pem
ssl.client.auth=none
EOF
	fi
}

# launch starts node n's JVM on its (formatted) data directory.
launch() {
	local n=$1
	# shellcheck disable=SC2046
	nohup java $(java_opts "$n") -cp "$(kafka_classpath)" kafka.Kafka "$(datadir "$n")/server.properties" \
		>"$services/kafka-$n.out" 2>&1 &
	echo $! >"$(pidfile "$n")"
	if [[ $n == c ]]; then
		log "Kafka $kafka_version controller starting (pid $!, port $(controller_port 1), log $services/kafka-$n.log)"
	else
		log "Kafka $kafka_version node $n starting (pid $!, port $(broker_port "$n"), log $services/kafka-$n.log)"
	fi
}

# wait_port waits until node n's broker port answers.
wait_port() {
	local n=$1 i
	for i in $(seq 1 240); do
		if port_open "$(broker_port "$n")"; then return 0; fi
		if ! alive "$(pidfile "$n")"; then
			log "Kafka node $n exited; its errors and last lines:"
			grep -E 'ERROR|FATAL' "$services/kafka-$n.log" 2>/dev/null | tail -n 15 >&2 || true
			tail -n 15 "$services/kafka-$n.out" "$services/kafka-$n.log" >&2 2>/dev/null || true
			exit 1
		fi
		sleep 0.25
	done
	log "Kafka node $n did not open its port within 60s"
	exit 1
}

# wait_metadata waits until the cluster answers a metadata request.
wait_metadata() {
	local i
	for i in $(seq 1 60); do
		if java -cp "$(kafka_classpath)" "-Dlog4j2.configurationFile=$root/scripts/kafka/log4j2.properties" \
			"-Deddy.kafka.log=$services/kafka-tools.log" \
			org.apache.kafka.tools.TopicCommand --bootstrap-server "$(bootstrap)" --list \
			>/dev/null 2>"$services/kafka-tools.err"; then
			return 0
		fi
		sleep 1
	done
	log "Kafka did not answer a metadata request:"
	cat "$services/kafka-tools.err" >&2
	exit 1
}

start_kafka() {
	if kafka_ready; then
		log "Kafka already running ($(bootstrap))"
		return
	fi
	local n p count=${EDDY_KAFKA_NODES:-1} ports
	ports=$((2 * count))
	if [[ ${EDDY_KAFKA_SECURE:-1} == 1 ]]; then ports=$((3 * count)); fi
	for p in $(seq "$base_port" $((base_port + ports - 1))); do
		if port_open "$p"; then
			log "port $p is in use by another process; set EDDY_KAFKA_PORT"
			exit 1
		fi
	done
	fetch_kafka
	rm -rf "$services/kafka-data" "$services/kafka.controller" "$services/kafka.secure"
	local scram=()
	if [[ ${EDDY_KAFKA_SECURE:-1} == 1 ]]; then
		touch "$services/kafka.secure"
		[[ -f $secure_dir/admin.password ]] || make_secrets
		scram=(--add-scram "SCRAM-SHA-512=[name=admin,password=$(cat "$secure_dir/admin.password")]")
	fi
	local members
	members=$(seq 1 "$count")
	if [[ ${EDDY_KAFKA_CONTROLLER:-combined} == dedicated ]]; then
		touch "$services/kafka.controller"
		members="c $members"
	fi
	echo "$count" >"$services/kafka.nodes"
	local cluster_id
	cluster_id=$(java -cp "$(kafka_classpath)" kafka.tools.StorageTool random-uuid 2>/dev/null)
	for n in $members; do
		write_config "$n"
		# shellcheck disable=SC2046
		java $(java_opts "$n") -cp "$(kafka_classpath)" kafka.tools.StorageTool format \
			-t "$cluster_id" -c "$(datadir "$n")/server.properties" "${scram[@]}" >"$services/kafka-format-$n.log" 2>&1 ||
			{ cat "$services/kafka-format-$n.log" >&2; exit 1; }
	done
	for n in $members; do launch "$n"; done
	for n in $(seq 1 "$count"); do wait_port "$n"; done
	# The port answering is not enough: wait until a metadata request succeeds.
	wait_metadata
}

kill_node() {
	local n=$1 pid
	if ! alive "$(pidfile "$n")"; then
		log "Kafka node $n is not running"
		return
	fi
	pid=$(cat "$(pidfile "$n")")
	kill -9 "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	rm -f "$(pidfile "$n")"
	log "Kafka node $n killed (SIGKILL); its data stays in $(datadir "$n")"
}

restart_node() {
	local n=$1
	if node_ready "$n"; then
		log "Kafka node $n already running"
		return
	fi
	[[ -f $(datadir "$n")/server.properties ]] || { log "node $n has no data directory: start the cluster first"; exit 1; }
	launch "$n"
	wait_port "$n"
}

# leader prints the node id leading a topic partition.
leader() {
	java -cp "$(kafka_classpath)" "-Dlog4j2.configurationFile=$root/scripts/kafka/log4j2.properties" \
		"-Deddy.kafka.log=$services/kafka-tools.log" \
		org.apache.kafka.tools.TopicCommand --bootstrap-server "$(bootstrap)" --describe --topic "$1" 2>/dev/null |
		awk -v p="$2" '{ for (i = 1; i < NF; i++) { if ($i == "Partition:") part = $(i+1); if ($i == "Leader:" && part == p) { print $(i+1); exit } } }'
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

# start_secure_registry starts the second registry: HTTPS with the test
# certificate, basic auth (user eddy, generated password) required.
start_secure_registry() {
	[[ -f $services/kafka.secure || ${EDDY_KAFKA_SECURE:-1} == 1 ]] || return 0
	if alive "$services/registry-tls.pid"; then return; fi
	if port_open "$secure_registry_port"; then
		log "port $secure_registry_port is in use by another process; set EDDY_REGISTRY_PORT"
		exit 1
	fi
	[[ -f $secure_dir/registry.password ]] || make_secrets
	cat >"$secure_dir/registry.yaml" <<EOF
server:
  host: 127.0.0.1
  port: $secure_registry_port
storage:
  type: memory
compatibility:
  default_level: BACKWARD
security:
  tls:
    enabled: true
    cert_file: $secure_dir/server.pem
    key_file: $secure_dir/server.key
    min_version: TLS1.2
    client_auth: none
  auth:
    enabled: true
    methods: [basic]
    bootstrap:
      enabled: true
    rbac:
      enabled: true
      default_role: readonly
      super_admins: [eddy]
EOF
	chmod 600 "$secure_dir/registry.yaml"
	SCHEMA_REGISTRY_BOOTSTRAP_USERNAME=$(cat "$secure_dir/registry.user") \
		SCHEMA_REGISTRY_BOOTSTRAP_PASSWORD=$(cat "$secure_dir/registry.password") \
		nohup "$registry_bin" -config "$secure_dir/registry.yaml" >"$services/registry-tls.log" 2>&1 &
	echo $! >"$services/registry-tls.pid"
	log "schema registry (HTTPS, basic auth) starting (pid $!, port $secure_registry_port, log $services/registry-tls.log)"
	local i
	for i in $(seq 1 60); do
		if curl -sS -o /dev/null --max-time 2 --cacert "$secure_dir/ca.pem" "https://127.0.0.1:$secure_registry_port/" 2>/dev/null; then return; fi
		if ! alive "$services/registry-tls.pid"; then
			log "secured schema registry exited:"
			tail -n 20 "$services/registry-tls.log" >&2
			exit 1
		fi
		sleep 0.5
	done
	log "secured schema registry did not answer within 30s"
	exit 1
}

stop_one() {
	local name=$1 pidfile=$2
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
	echo "export EDDY_KAFKA_BOOTSTRAP=$(bootstrap)"
	echo "export EDDY_SCHEMA_REGISTRY_URL=http://127.0.0.1:$registry_port"
	# The first node's process: make bench counts its CPU during each run.
	if [[ -f $(pidfile 1) ]]; then echo "export EDDY_KAFKA_PID=$(cat "$(pidfile 1)")"; fi
	if secure; then
		echo "export EDDY_KAFKA_SASL_BOOTSTRAP=$(sasl_bootstrap)"
		echo "export EDDY_SCHEMA_REGISTRY_TLS_URL=https://127.0.0.1:$secure_registry_port"
		echo "export EDDY_SECRETS_DIR=$secure_dir"
	fi
}

case ${1:-} in
start)
	mkdir -p "$services"
	what=${2:-all}
	if [[ $what == all || $what == kafka ]]; then start_kafka; fi
	if [[ $what == all || $what == registry ]]; then start_registry && start_secure_registry; fi
	if [[ $what == all || $what == kafka ]]; then echo "Kafka bootstrap servers: $(bootstrap)"; fi
	if [[ $what == all || $what == registry ]]; then echo "Schema registry URL:     http://127.0.0.1:$registry_port"; fi
	if secure && [[ $what == all || $what == kafka ]]; then echo "SASL_SSL bootstrap:      $(sasl_bootstrap) (CA and passwords in $secure_dir)"; fi
	if [[ -f $services/registry-tls.pid ]] && [[ $what == all || $what == registry ]]; then echo "Secured registry URL:    https://127.0.0.1:$secure_registry_port"; fi
	;;
stop)
	stop_one registry "$services/registry.pid"
	stop_one "secured registry" "$services/registry-tls.pid"
	if [[ -f $services/kafka.nodes ]]; then
		# Signal every node first: a controller quorum left without a
		# majority would hold the last nodes' shutdown.
		for n in $(seq 1 "$(nodes)"); do
			alive "$(pidfile "$n")" && kill "$(cat "$(pidfile "$n")")" 2>/dev/null || true
		done
		for n in $(seq 1 "$(nodes)"); do stop_one "kafka node $n" "$(pidfile "$n")"; done
		# A dedicated controller last: the brokers' shutdown needs it.
		stop_one "kafka controller" "$(pidfile c)"
	fi
	rm -rf "$services/kafka-data" "$services/kafka.nodes" "$services/kafka.controller" "$services/kafka.secure" "$secure_dir"
	;;
status)
	ok=0
	if kafka_ready; then echo "Kafka: running on $(bootstrap) (logs $services/kafka-*.log)"; else echo "Kafka: not running"; ok=1; fi
	if registry_ready; then echo "schema registry: running on http://127.0.0.1:$registry_port (pid $(cat "$services/registry.pid"))"; else echo "schema registry: not running"; ok=1; fi
	exit $ok
	;;
env)
	print_env
	;;
kill)
	kill_node "${2:?usage: $0 kill NODE}"
	;;
restart)
	restart_node "${2:?usage: $0 restart NODE}"
	;;
fetch)
	fetch_kafka
	build_registry
	echo "libs $libs"
	echo "registry $registry_bin"
	;;
leader)
	leader "${2:?usage: $0 leader TOPIC PARTITION}" "${3:?usage: $0 leader TOPIC PARTITION}"
	;;
*)
	echo "usage: $0 start [kafka|registry]|stop|status|env|kill NODE|restart NODE|leader TOPIC PARTITION|fetch" >&2
	exit 2
	;;
esac
