package kafkatest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// WaitCaughtUp waits until consumer group has committed offsets at the end
// of every partition of the given topics (and of every other topic it
// consumes), or fails the test after timeout. It is how a test knows a
// streams application has processed all its input.
func WaitCaughtUp(t testing.TB, brokers, group string, timeout time.Duration, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	adm := admin(t, brokers)
	var last string
	for {
		lag, err := adm.Lag(ctx, group)
		if err == nil {
			if l, ok := lag[group]; ok && l.Error() == nil {
				done, why := caughtUp(l, topics)
				if done {
					return
				}
				last = why
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafkatest: group %s did not catch up within %v: %s", group, timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func caughtUp(l kadm.DescribedGroupLag, topics []string) (bool, string) {
	for _, want := range topics {
		if _, ok := l.Lag[want]; !ok {
			return false, "no committed offsets on " + want
		}
	}
	var total int64
	for _, parts := range l.Lag {
		for _, p := range parts {
			if p.End.Offset > 0 && p.Commit.At < 0 {
				return false, "partition " + p.Topic + " not committed yet"
			}
			total += p.Lag
		}
	}
	if total > 0 {
		return false, fmt.Sprintf("lag %d", total)
	}
	return true, ""
}

// GroupLag returns how many records of its topics consumer group has not
// committed yet (partitions it never committed count in full).
func GroupLag(t testing.TB, brokers, group string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	lag, err := admin(t, brokers).Lag(ctx, group)
	if err != nil {
		t.Fatalf("kafkatest: lag of group %s: %v", group, err)
	}
	l, ok := lag[group]
	if !ok || l.Error() != nil {
		t.Fatalf("kafkatest: lag of group %s: %v", group, l.Error())
	}
	var total int64
	for _, parts := range l.Lag {
		for _, p := range parts {
			total += p.Lag
		}
	}
	return total
}
