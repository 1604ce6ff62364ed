package main

import (
	"encoding/json"
	"testing"
)

// The example as `go run ./examples/enrich` runs it, on its embedded broker,
// exactly once: every order enriched once, each customer's orders in the
// order they were written, every order notified once (by idempotency key).
func TestEnrichExample(t *testing.T) {
	const n = 600
	res, err := run(16, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != n {
		t.Fatalf("%d enriched orders, want %d", len(res.Records), n)
	}
	last := map[string]string{}
	seen := map[string]bool{}
	for _, r := range res.Records {
		var e Enriched
		if err := json.Unmarshal([]byte(r[1]), &e); err != nil {
			t.Fatal(err)
		}
		if e.Customer != "Customer "+r[0][2:] || e.Tier == "" {
			t.Fatalf("order %s of %s enriched as %+v", e.Order, r[0], e)
		}
		if seen[e.Order] {
			t.Fatalf("order %s enriched twice", e.Order)
		}
		seen[e.Order] = true
		if e.Order <= last[r[0]] {
			t.Fatalf("customer %s: order %s after %s", r[0], e.Order, last[r[0]])
		}
		last[r[0]] = e.Order
	}
	if res.Notified != n {
		t.Fatalf("%d orders notified, want %d", res.Notified, n)
	}
}
