package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// The example as `go run ./examples/wordcount` runs it, on its embedded
// broker with two instances: the counts of its built-in text, sorted.
func TestWordcountExample(t *testing.T) {
	var out bytes.Buffer
	if err := run("", "", "exactly_once", 2, 4, zap.NewNop(), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"river\t3\n", "counted\t2\n", "once\t2\n", "the\t4\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if !strings.HasPrefix(got, "a\t") {
		t.Errorf("output not sorted by word:\n%s", got)
	}
}
