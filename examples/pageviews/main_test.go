package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// The example as `go run ./examples/pageviews` runs it, on its embedded
// broker: every user answered exactly through instance 0's endpoint
// (forwarded for the users it does not own), every hour emitted once.
func TestPageviewsExample(t *testing.T) {
	var out bytes.Buffer
	if err := run("", 2, 0, zap.NewNop(), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"all 40 users exact", "24 hours × 5 pages, adding up to all 4800 views", "00:00 /\t38"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
