// Package kafkatest gives tests a Kafka broker and a schema registry, and the
// helpers a streams test needs: create topics, produce records, and read a
// topic to its end under read_committed.
//
// Kafka and Registry give a test an Apache Kafka broker and a schema
// registry: the services named by EDDY_KAFKA_BOOTSTRAP and
// EDDY_SCHEMA_REGISTRY_URL when set, else containers started through
// testcontainers-go (StartKafka, StartRegistry) and removed when the test
// ends. The images default to the public ones (DefaultKafkaImage,
// DefaultRegistryImage); EDDY_KAFKA_IMAGE and EDDY_REGISTRY_IMAGE name
// others (scripts/containers.sh builds both from the package registries and
// prints the settings). Containers run on the host's network and listen on
// free 127.0.0.1 ports; kafkatest removes them itself, so testcontainers'
// reaper can stay off (TESTCONTAINERS_RYUK_DISABLED=true). When no container
// engine answers, the test fails with what to start or set; WithFallback
// lets it use an embedded franz-go kfake broker (and the registry as a local
// process) instead, with a log line saying so.
//
// Broker and SchemaRegistry are Kafka and Registry with WithFallback, for
// eddy's own suite. With EDDY_REQUIRE_REAL_SERVICES=1 (as `make test` sets)
// an embedded broker fails the test.
//
// Fault tests place their faults by observed progress, not by sleeping: Feed
// keeps input flowing at a steady rate in the background, and
// CommittedTotal tells how much of it a consumer group has committed, so a
// kill or restart can strike mid-stream on a fast machine and a loaded one
// alike.
//
// A test in a service that links eddy (examples/ordertotals is a whole one):
//
//	func TestPipeline(t *testing.T) {
//		brokers := kafkatest.Kafka(t)
//		in := kafkatest.UniqueName(t, "orders")
//		kafkatest.CreateTopic(t, brokers, in, 3, nil)
//		kafkatest.Produce(t, brokers, in, kafkatest.KV("order-1", `{"total":12}`))
//		// … run the app …
//		got := kafkatest.ConsumeAll(t, brokers, out)
//	}
package kafkatest
