package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
)

// The example as `go run ./examples/pricing` runs it, on its embedded
// broker, exactly once: every order priced with the price valid when it was
// placed, although every order arrived after the last price change.
func TestPricingExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(true, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := "09:30 apple: o1 3 × 1.00\n13:00 pear: o2 1 × 2.00\n12:00 apple: o3 2 × 1.20\n17:59 apple: o4 5 × 1.20\n16:10 pear: o5 4 × 1.80\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
	// -latest: the same run on a plain table prices the orders with the
	// evening's prices.
	out.Reset()
	if err := run(false, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want = "09:30 apple: o1 3 × 0.90\n13:00 pear: o2 1 × 1.80\n12:00 apple: o3 2 × 0.90\n17:59 apple: o4 5 × 0.90\n16:10 pear: o5 4 × 1.80\n"
	if out.String() != want {
		t.Fatalf("-latest: got\n%s\nwant\n%s", out.String(), want)
	}
}

// The same input through the latest-value join prices every order with the
// last price of its product — the evening's 0.90 for the morning's apples:
// the wrong answer the versioned table avoids.
func TestLatestValueJoinGivesTheWrongPrices(t *testing.T) {
	priced := func(versioned bool) string {
		top, err := Topology("prices", "orders", "priced", versioned)
		if err != nil {
			t.Fatal(err)
		}
		d := streamstest.New(t, top)
		str := serde.String()
		in := map[string]*streamstest.InputTopic[string, string]{
			"prices": streamstest.Input(d, "prices", str, str),
			"orders": streamstest.Input(d, "orders", str, str),
		}
		for _, e := range Input(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)) {
			in[e.Topic].PipeAt(e.Key, e.Value, e.At.UnixMilli())
		}
		var lines []string
		for _, r := range streamstest.Output(d, "priced", str, str).ReadRecords() {
			lines = append(lines, fmt.Sprintf("%s:%s", r.Key, r.Value))
		}
		return strings.Join(lines, ", ")
	}
	right, wrong := priced(true), priced(false)
	if want := "apple:o1 3 × 1.00, pear:o2 1 × 2.00, apple:o3 2 × 1.20, apple:o4 5 × 1.20, pear:o5 4 × 1.80"; right != want {
		t.Fatalf("versioned: %s, want %s", right, want)
	}
	if want := "apple:o1 3 × 0.90, pear:o2 1 × 1.80, apple:o3 2 × 0.90, apple:o4 5 × 0.90, pear:o5 4 × 1.80"; wrong != want {
		t.Fatalf("latest value: %s, want %s", wrong, want)
	}
}
