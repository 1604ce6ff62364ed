package streamstest

import (
	"fmt"

	"github.com/eddy-go/eddy/internal/rt"
)

// HoldTopic makes the driver hold back the records sent to topic (one the
// topology reads) until Release: a broker's delay between writing a record
// and a task reading it, which the driver otherwise does not have.
func HoldTopic(d *Driver, topic string) {
	if d.held == nil {
		d.held = map[string][]*rt.RawRecord{}
	}
	if _, ok := d.held[topic]; !ok {
		d.held[topic] = nil
	}
}

// Held is the number of records held back for topic.
func Held(d *Driver, topic string) int { return len(d.held[topic]) }

// Release processes the first n held records of topic (in the order they
// were sent), then commits unless ManualCommit.
func Release(d *Driver, topic string, n int) error {
	q := d.held[topic]
	if n > len(q) {
		return fmt.Errorf("streamstest: %d records held for %s, not %d", len(q), topic, n)
	}
	d.inbox = append(d.inbox, q[:n]...)
	d.held[topic] = q[n:]
	if err := d.drain(); err != nil {
		return d.fail(err)
	}
	if !d.opts.ManualCommit {
		return d.fail(d.Commit())
	}
	return nil
}
