//go:build !eddy_librdkafka

package integration_test

// buildTags are the tags this test binary was built with; the worker
// processes are built with them too.
const buildTags = ""

// isTooLargeLibrdkafka: this build has no librdkafka.
func isTooLargeLibrdkafka(error) bool { return false }
