# eddy — make targets. `make test` is the one test command.

.PHONY: test chaos bench fuzz parity proto services-start services-stop services-status

## test: gofmt and vet checks, then go test -race on every module against a
## real Kafka broker and schema registry (started and stopped as needed).
test:
	scripts/test.sh

## chaos: the long fault tests (brokers SIGKILLed and restarted, a 3-node
## cluster losing its leader, an outage longer than the transaction timeout,
## the SIGKILL loops of the at-least-once, async, deduplicating and
## crash-during-restore apps, an async service's stall, the rolling upgrade
## from the previous release), which make test leaves out; .ci/run runs both.
chaos:
	scripts/test.sh chaos

## bench: throughput of eddy vs a plain client loop on the real broker
## (results in docs/performance.md).
bench:
	scripts/bench.sh

## fuzz: run every fuzz target for FUZZTIME each (default 1m), e.g.
## `make fuzz FUZZTIME=10m`; FUZZ=pattern narrows to some targets.
fuzz:
	scripts/fuzz.sh

## parity: rerun the parity scenarios on Kafka Streams' own test driver and
## rewrite the expectations the Go parity tests compare against, then compare
## eddy with Kafka Streams on PARITY_SEEDS (200) random inputs per scenario.
parity:
	scripts/parity.sh

## proto: regenerate the Go messages of eddy's Protobuf schemas (the
## tests' internal/testpb, the ordertotals example's shoppb) with
## tools/protogen (no protoc needed).
proto:
	cd tools && GOWORK=off go run ./protogen -I ../internal/testpb/proto -out .. \
		-module github.com/eddy-go/eddy eddytest/money.proto eddytest/all.proto eddytest/ten.proto
	cd tools && GOWORK=off go run ./protogen -I ../examples/ordertotals/shoppb/proto -out ../examples \
		-module github.com/eddy-go/eddy/examples shop/shop.proto

## services-start: start the real broker and schema registry on 127.0.0.1.
services-start:
	scripts/kafka.sh start

## services-stop: stop what services-start started.
services-stop:
	scripts/kafka.sh stop

## services-status: say whether the broker and registry are running.
services-status:
	scripts/kafka.sh status
