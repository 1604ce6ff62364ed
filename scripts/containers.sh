#!/usr/bin/env bash
# scripts/containers.sh — a container engine and the images eddy's container
# tests run (integration/kafkatest starts them through testcontainers-go),
# made from the package registries alone: no image registry is needed.
#
#   scripts/containers.sh up       install podman and runc if missing, serve podman's
#                                  Docker-compatible API on a unix socket, build the
#                                  images if missing or out of date
#   scripts/containers.sh down     stop the API service, if this script started it
#   scripts/containers.sh status   exit 0 when the API answers and both images exist
#   scripts/containers.sh env      print the export lines testcontainers-go and kafkatest read
#   scripts/containers.sh images   build the images if missing or out of date (FORCE=1: rebuild)
#   scripts/containers.sh leftovers [RUN]  list containers kafkatest started that still
#                                    exist (those of test run RUN, when given)
#   scripts/containers.sh run-id PID print an id for a test run by process PID, which
#                                    no later process shares (scripts/test.sh exports
#                                    it as EDDY_TEST_RUN; kafkatest labels its
#                                    containers with it)
#   scripts/containers.sh reap       remove the containers of test runs, and of test
#                                    processes, that ended without removing them (a
#                                    killed `make test`, a test binary SIGKILLed or
#                                    timed out); kafkatest does the same for test
#                                    processes before its first container
#   scripts/containers.sh netstate   print the host's firewall rules and forwarding setting
#                                    (scripts/test.sh checks they are the same after a run)
#
# Engine: rootful podman and runc from Debian's packages (apt-get, as root),
# configured by scripts/containers/containers.conf through CONTAINERS_CONF:
# runc with the cgroupfs manager (crun refuses hybrid cgroup hierarchies),
# open-files and process limits a sandboxed machine allows, and the host's
# network for every container, so no bridge, firewall rule or forwarding
# setting is ever made: containers listen on 127.0.0.1 ports the tests choose.
# The API service (podman system service) listens on $EDDY_SERVICES_DIR/podman.sock.
#
# Images (kept in podman's image store, so later runs reuse them; each is
# labelled with a hash of what it is made of and rebuilt when that changes):
#   localhost/eddy/kafka:<version>            Apache Kafka (scripts/kafka/pom.xml's version) on
#                                             Debian bookworm with a headless JRE 17
#                                             (debootstrap; the root filesystem is cached as a
#                                             tarball in $EDDY_CACHE), configured by KAFKA_*
#                                             variables as the public apache/kafka image is
#   localhost/eddy/schema-registry:<version>  the AxonOps Schema Registry pinned in tools/go.mod,
#                                             a static binary laid out as its public image
#
# Settings (environment): EDDY_SERVICES_DIR, EDDY_CACHE (as scripts/kafka.sh),
# EDDY_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
services=${EDDY_SERVICES_DIR:-${TMPDIR:-/tmp}/eddy-services-$(id -u)}
cache=${EDDY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/eddy}
here=$root/scripts/containers
export CONTAINERS_CONF=$here/containers.conf
sock=$services/podman.sock
pidfile=$services/podman.pid
suite=bookworm
mirror=${EDDY_DEBIAN_MIRROR:-http://deb.debian.org/debian}

kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$root/scripts/kafka/pom.xml")
registry_version=$(sed -n 's:^\s*github.com/axonops/axonops-schema-registry \(v[^ ]*\).*:\1:p' "$root/tools/go.mod")
base_image=localhost/eddy/debian-jre:$suite
kafka_image=localhost/eddy/kafka:$kafka_version
registry_image=localhost/eddy/schema-registry:${registry_version#v}
# The label kafkatest puts on every container it starts.
test_label=org.eddy-go.kafkatest

log() { printf 'containers.sh: %s\n' "$*" >&2; }

alive() { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

api_answers() { curl -sf --max-time 5 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; }

# install puts podman, runc and debootstrap on the machine when any is missing.
install() {
	local missing=() c
	for c in podman runc debootstrap curl; do command -v "$c" >/dev/null || missing+=("$c"); done
	((${#missing[@]} == 0)) && return
	log "installing ${missing[*]} from Debian's packages (first run only)"
	local sudo=()
	[[ $(id -u) == 0 ]] || sudo=(sudo -n)
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
		{ "${sudo[@]}" apt-get update -q >&2 && "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; } ||
		{ log "could not install ${missing[*]} with apt-get (as root, or with password-less sudo)"; exit 1; }
}

start_service() {
	if api_answers; then
		log "container API already answering on $sock"
		return
	fi
	mkdir -p "$services"
	rm -f "$sock"
	nohup podman system service --time=0 "unix://$sock" >"$services/podman.log" 2>&1 &
	echo $! >"$pidfile"
	local i
	for i in $(seq 1 100); do
		api_answers && return
		alive || break
		sleep 0.2
	done
	log "podman's API service did not answer on $sock:"
	cat "$services/podman.log" >&2
	exit 1
}

stop_service() {
	if ! alive; then
		rm -f "$pidfile"
		return
	fi
	local pid i
	pid=$(cat "$pidfile")
	kill "$pid" 2>/dev/null || true
	for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$pidfile" "$sock"
	log "container API service stopped"
}

# inputs_of prints a short hash of files and words: an image's identity.
inputs_of() { { cat "$@" 2>/dev/null; } | sha256sum | cut -c1-16; }

image_inputs() { podman image inspect --format '{{index .Labels "org.eddy-go.inputs"}}' "$1" 2>/dev/null || true; }

# base_rootfs makes, once, a Debian root filesystem with a headless JRE as a
# tarball in the cache.
base_rootfs() {
	local tarball=$cache/containers/debian-$suite-jre17.tar
	if [[ -f $tarball ]]; then
		echo "$tarball"
		return
	fi
	log "making a Debian $suite root filesystem with a headless JRE (debootstrap; first run only)"
	mkdir -p "$cache/containers"
	local dir
	dir=$(mktemp -d "$cache/containers/rootfs.XXXXXX")
	debootstrap --variant=minbase --include=openjdk-17-jre-headless "$suite" "$dir" "$mirror" >"$services/debootstrap.log" 2>&1 ||
		{ tail -20 "$services/debootstrap.log" >&2; rm -rf "$dir"; exit 1; }
	rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc/* "$dir"/usr/share/man/*
	tar -C "$dir" -cf "$tarball.tmp" .
	rm -rf "$dir"
	mv "$tarball.tmp" "$tarball"
	echo "$tarball"
}

build_images() {
	local fetched libs registry_bin inputs ctx
	fetched=$("$root/scripts/kafka.sh" fetch)
	libs=$(awk '$1 == "libs" { print $2 }' <<<"$fetched")
	registry_bin=$(awk '$1 == "registry" { print $2 }' <<<"$fetched")

	if [[ -n ${FORCE:-} || -z $(image_inputs "$base_image") ]]; then
		local tarball
		tarball=$(base_rootfs)
		log "importing $base_image"
		podman import -q --change 'LABEL org.eddy-go.inputs=base' "$tarball" "$base_image" >/dev/null
	fi

	inputs=$(inputs_of "$here/kafka/Containerfile" "$here/kafka/entrypoint.sh" "$here/kafka/log4j2.properties" <(ls "$libs"))
	if [[ -n ${FORCE:-} || $(image_inputs "$kafka_image") != "$inputs" ]]; then
		log "building $kafka_image"
		ctx=$(mktemp -d)
		cp -r "$libs" "$ctx/libs"
		cp "$here/kafka/entrypoint.sh" "$here/kafka/log4j2.properties" "$ctx/"
		replace_image "$kafka_image" --build-arg "BASE=$base_image" --build-arg "INPUTS=$inputs" \
			-f "$here/kafka/Containerfile" "$ctx"
		rm -rf "$ctx"
	fi

	inputs=$(inputs_of "$here/registry/Containerfile" "$registry_bin")
	if [[ -n ${FORCE:-} || $(image_inputs "$registry_image") != "$inputs" ]]; then
		log "building $registry_image"
		ctx=$(mktemp -d)
		cp "$registry_bin" "$ctx/schema-registry"
		mkdir -m 1777 "$ctx/tmp"
		replace_image "$registry_image" --build-arg "INPUTS=$inputs" \
			-f "$here/registry/Containerfile" "$ctx"
		rm -rf "$ctx"
	fi
}

# replace_image builds an image with podman build ARGS… and removes the
# version it replaces (left untagged by the build).
replace_image() {
	local tag=$1 old
	shift
	old=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
	podman build -q --layers=false --network host -t "$tag" "$@" >/dev/null
	if [[ -n $old && $old != "$(podman image inspect --format '{{.Id}}' "$tag")" ]]; then
		podman rmi "$old" >/dev/null 2>&1 || true
	fi
}

# run_id PID: the process's id and start time (clock ticks since boot), which
# no later process shares; empty when PID is not running.
run_id() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	stat=${stat##*) }
	echo "$1.$(echo "$stat" | cut -d' ' -f20)"
}

print_env() {
	cat <<EOF
export DOCKER_HOST=unix://$sock
export TESTCONTAINERS_RYUK_DISABLED=true
export TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
export EDDY_KAFKA_IMAGE=$kafka_image
export EDDY_REGISTRY_IMAGE=$registry_image
EOF
}

case ${1:-} in
up)
	install
	start_service
	build_images
	log "container API on unix://$sock; images $kafka_image, $registry_image"
	;;
down)
	stop_service
	;;
status)
	ok=0
	if api_answers; then echo "container API: answering on unix://$sock"; else echo "container API: not answering"; ok=1; fi
	for i in "$kafka_image" "$registry_image"; do
		if [[ -n $(image_inputs "$i") ]]; then echo "image $i: present"; else echo "image $i: missing"; ok=1; fi
	done
	exit $ok
	;;
env)
	print_env
	;;
images)
	build_images
	;;
netstate)
	for f in /proc/sys/net/ipv4/ip_forward /proc/sys/net/ipv6/conf/all/forwarding; do
		[[ -r $f ]] && echo "$f $(cat "$f")"
	done
	for t in iptables-save ip6tables-save nft; do
		command -v "$t" >/dev/null || continue
		if [[ $t == nft ]]; then nft list ruleset 2>/dev/null || true; else "$t" 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//g' || true; fi
	done
	;;
leftovers)
	filter=$test_label
	[[ -n ${2:-} ]] && filter="$test_label.run=$2"
	podman ps -a --filter "label=$filter" --format '{{.ID}} {{.Image}} {{.Names}} {{.Status}}'
	;;
run-id)
	[[ -n ${2:-} ]] || { echo "usage: $0 run-id PID" >&2; exit 2; }
	run_id "$2"
	;;
reap)
	podman ps -a --filter "label=$test_label.run" --format "{{.ID}} {{index .Labels \"$test_label.run\"}}" |
		while read -r id run; do
			pid=${run%%.*}
			[[ $(run_id "$pid") == "$run" ]] && continue
			log "removing container $id, left by test run $run (no longer running)"
			podman rm -f "$id" >/dev/null
		done
	# kafkatest's own mark: the test process that started the container
	# (boot id/pid/start time), whatever started the tests.
	boot=$(cat /proc/sys/kernel/random/boot_id)
	podman ps -a --filter "label=$test_label.owner" --format "{{.ID}} {{index .Labels \"$test_label.owner\"}}" |
		while read -r id owner; do
			IFS=/ read -r oboot opid ostart <<<"$owner"
			[[ $oboot == "$boot" ]] || continue
			[[ $(run_id "$opid") == "$opid.$ostart" ]] && continue
			log "removing container $id, left by test process $opid (no longer running)"
			podman rm -f "$id" >/dev/null
		done
	;;
*)
	echo "usage: $0 up|down|status|env|images|leftovers [RUN]|run-id PID|reap|netstate" >&2
	exit 2
	;;
esac
