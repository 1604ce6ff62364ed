package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// The example as `go run ./examples/fraud` runs it, on its embedded
// broker: exactly the two incidents that cross the rule's score alert,
// once each, with the reasons, payments and logins that made them; the
// spree at home stays below the score; the three late payments land in
// the late-records topic.
func TestFraudExample(t *testing.T) {
	var out bytes.Buffer
	if err := run("", zap.NewNop(), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"acct-07 score 80 (09:46:20–09:51:20): 5 payments in 5 minutes; paid from BR, last login from NL",
		"acct-33 score 80 (10:20:00–10:25:00): €1200.00 paid in 5 minutes; last login from a new device (laptop-x) and country (BR)",
		"key acct-07|2026-11.1|",
		"2 alerts, 2 distinct idempotency keys",
		"of acct-02 at 09:12:00", "of acct-15 at 09:12:00", "of acct-28 at 09:12:00",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "acct-21 score") {
		t.Errorf("the spree at home raised an alert:\n%s", got)
	}
}

// The rule on its own: each part scores what it says, and a window with
// no logins yet can only score on velocity and amount.
func TestRuleScore(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	home := Login{ID: "l1", Device: "phone", Country: "DE", At: at}
	w := Window{Count: 2, TotalCents: 3_000, Countries: []string{"DE"}}
	cases := []struct {
		name   string
		c      Candidate
		score  int
		reason string
	}{
		{"ordinary", Candidate{Window: w, Logins: RecentLogins{[]Login{home, home}}}, 0, ""},
		{"velocity", Candidate{Window: Window{Count: 5, TotalCents: 500, Countries: []string{"DE"}}, Logins: RecentLogins{[]Login{home}}}, 50, "5 payments in 5 minutes"},
		{"amount", Candidate{Window: Window{Count: 1, TotalCents: 100_000, Countries: []string{"DE"}}}, 50, "€1000.00 paid in 5 minutes"},
		{"abroad", Candidate{Window: Window{Count: 1, TotalCents: 500, Countries: []string{"DE", "BR"}}, Logins: RecentLogins{[]Login{home}}}, 30, "paid from BR, last login from DE"},
		{"new device", Candidate{Window: Window{Count: 1, TotalCents: 500, Countries: []string{"BR"}},
			Logins: RecentLogins{[]Login{home, {ID: "l2", Device: "laptop", Country: "BR"}}}}, 30, "last login from a new device (laptop) and country (BR)"},
	}
	for _, c := range cases {
		s := RuleV1.Score(c.c)
		if s.Score != c.score || (c.reason != "" && !strings.Contains(strings.Join(s.Reasons, "; "), c.reason)) {
			t.Errorf("%s: score %d %q, want %d with %q", c.name, s.Score, s.Reasons, c.score, c.reason)
		}
	}
	// Logins kept in the order they happened, the last few; asOf sees
	// those up to a time.
	l := RecentLogins{}
	for _, m := range []int{5, 1, 3, 2, 4, 6} { // arriving out of order
		l = l.add(Login{ID: fmt.Sprint(m), At: at.Add(time.Duration(m) * time.Minute)})
	}
	var ids []string
	for _, x := range l.Logins {
		ids = append(ids, x.ID)
	}
	if fmt.Sprint(ids) != "[3 4 5 6]" {
		t.Errorf("recent logins %v, want the last %d in time order", ids, keptLogins)
	}
	if got := l.asOf(at.Add(4 * time.Minute)).Logins; len(got) != 2 || got[1].ID != "4" {
		t.Errorf("logins as of minute 4: %v, want 3 and 4", got)
	}
}
