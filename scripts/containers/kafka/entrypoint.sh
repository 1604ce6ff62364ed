#!/bin/bash
# The Kafka image's entrypoint. Configuration as in the public apache/kafka
# image:
#   - with no KAFKA_* setting, one combined broker+controller on
#     localhost:9092 (controller on localhost:9093);
#   - otherwise server.properties is exactly the KAFKA_* settings: the prefix
#     dropped, lower-cased, "___" becoming "-", "__" becoming "_" and "_"
#     becoming "." (KAFKA_LOG_DIRS -> log.dirs); the JVM settings
#     KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS and KAFKA_OPTS are not
#     broker properties;
#   - CLUSTER_ID names the cluster whose storage is formatted at start.
# The JVM replaces this shell (exec), so a stop's SIGTERM reaches Kafka and
# the broker shuts down at once instead of waiting out the stop timeout.
set -euo pipefail
config=/opt/kafka/config/server.properties
jvm_only=" KAFKA_HEAP_OPTS KAFKA_JVM_PERFORMANCE_OPTS KAFKA_OPTS KAFKA_GC_LOG_OPTS KAFKA_LOG4J_OPTS KAFKA_JMX_OPTS KAFKA_VERSION "

settings=()
while IFS='=' read -r name value; do
	[[ $name == KAFKA_* && $jvm_only != *" $name "* ]] || continue
	key=${name#KAFKA_}
	key=${key,,}
	key=${key//___/-}
	key=${key//__/@}
	key=${key//_/.}
	key=${key//@/_}
	settings+=("$key=$value")
done < <(env)

if ((${#settings[@]} == 0)); then
	settings=(
		node.id=1
		process.roles=broker,controller
		listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
		advertised.listeners=PLAINTEXT://localhost:9092
		controller.listener.names=CONTROLLER
		listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
		controller.quorum.voters=1@localhost:9093
		offsets.topic.replication.factor=1
		transaction.state.log.replication.factor=1
		transaction.state.log.min.isr=1
		group.initial.rebalance.delay.ms=0
	)
fi
printf '%s\n' "${settings[@]}" >"$config"
grep -q '^log\.dirs=' "$config" || echo "log.dirs=/tmp/kraft-combined-logs" >>"$config"

heap=${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}
perf=${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true}
log4j=${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties}
cp='/opt/kafka/libs/*'

# shellcheck disable=SC2086
java $log4j -cp "$cp" kafka.tools.StorageTool format --ignore-formatted \
	-t "${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}" -c "$config" >/tmp/kafka-format.log 2>&1 ||
	{ cat /tmp/kafka-format.log >&2; exit 1; }

# shellcheck disable=SC2086
exec java $heap $perf $log4j ${KAFKA_OPTS:-} -cp "$cp" kafka.Kafka "$config"
