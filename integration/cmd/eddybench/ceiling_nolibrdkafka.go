//go:build !eddy_librdkafka

package main

import (
	"context"
	"time"
)

// ceilingLibrdkafka needs librdkafka: this build has none (build eddybench
// with -tags eddy_librdkafka).
func ceilingLibrdkafka(context.Context, string, string, string, string, bool, time.Duration) {
	fail("the librdkafka ceiling needs eddybench built with -tags eddy_librdkafka")
}
