// Package kafkatest gives tests a Kafka broker and a schema registry, and the
// helpers a streams test needs: create topics, produce records, and read a
// topic to its end under read_committed.
//
// Broker returns, in order of preference, the cluster named by
// EDDY_KAFKA_BOOTSTRAP, a Kafka container (testcontainers-go, when a Docker
// engine is reachable), or an embedded franz-go kfake cluster.
// SchemaRegistry returns EDDY_SCHEMA_REGISTRY_URL or starts the AxonOps
// Schema Registry on a free loopback port. With EDDY_REQUIRE_REAL_SERVICES=1
// (as `make test` sets), anything but a real broker and registry fails the
// test.
//
// Fault tests place their faults by observed progress, not by sleeping: Feed
// keeps input flowing at a steady rate in the background, and
// CommittedTotal tells how much of it a consumer group has committed, so a
// kill or restart can strike mid-stream on a fast machine and a loaded one
// alike.
//
// A test in a service that links eddy:
//
//	func TestPipeline(t *testing.T) {
//		brokers := kafkatest.Broker(t)
//		in := kafkatest.UniqueName(t, "orders")
//		kafkatest.CreateTopic(t, brokers, in, 3, nil)
//		kafkatest.Produce(t, brokers, in, kafkatest.KV("order-1", `{"total":12}`))
//		// … run the app …
//		got := kafkatest.ConsumeAll(t, brokers, out)
//	}
package kafkatest
