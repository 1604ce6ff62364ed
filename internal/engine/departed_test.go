package engine

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
)

// fencerStub is a TxnFencer whose open transactions and group members are
// set by the test; it records what it fenced.
type fencerStub struct {
	open    []string
	procs   map[string]bool
	stable  bool
	fenced  []string
	askedOn []kclient.TP
}

func (f *fencerStub) OpenTransactions(_ context.Context, tps []kclient.TP) ([]string, error) {
	f.askedOn = tps
	return f.open, nil
}

func (f *fencerStub) GroupProcesses(context.Context, string) (map[string]bool, bool, error) {
	return f.procs, f.stable, nil
}

func (f *fencerStub) Fence(_ context.Context, id string) error {
	f.fenced = append(f.fenced, id)
	return nil
}

// Only the open transactions of the application's own transactional ids
// whose process is gone from the group are ended: not another
// application's (whose id shares a prefix), not this instance's, not a
// member's, and none while the group's members cannot be told.
func TestDepartedFencesOnlyTransactionsOfProcessesGoneFromTheGroup(t *testing.T) {
	d := &departed{cfg: &Config{AppID: "orders", ProcessID: "me", ExactlyOnce: true}, log: zap.NewNop()}
	open := []string{
		"orders-dead-0", "orders-dead-1", // a departed instance's two threads
		"orders-alive-0",       // a member's (its markers on their way)
		"orders-me-0",          // this instance's
		"orders-eu-x-0",        // a member whose process has a dash in its name
		"orders-no-index",      // not a stream thread's id
		"other-dead-0",         // another application's
		"orders-with-dash-p-2", // a process with dashes in its name
	}
	f := &fencerStub{open: open, procs: map[string]bool{"alive": true, "me": true, "eu-x": true}, stable: false}
	tps := []kclient.TP{{Topic: "orders-counts-changelog", Partition: 1}}
	if err := d.fence(context.Background(), f, tps); err != nil {
		t.Fatal(err)
	}
	if len(f.fenced) != 0 {
		t.Fatalf("fenced %v while the group's members could not be told", f.fenced)
	}
	f.stable = true
	if err := d.fence(context.Background(), f, tps); err != nil {
		t.Fatal(err)
	}
	if want := []string{"orders-dead-0", "orders-dead-1", "orders-with-dash-p-2"}; !slices.Equal(f.fenced, want) {
		t.Fatalf("fenced %v, want %v", f.fenced, want)
	}
	if !slices.Equal(f.askedOn, tps) {
		t.Fatalf("looked for open transactions on %v, want the changelogs %v", f.askedOn, tps)
	}
}

// A transactional id from the brokers (any process's) parses as one of
// the application's only when it is the application id, a process and a
// thread index joined by dashes, and never panics.
func FuzzDepartedProcess(f *testing.F) {
	for _, s := range []string{"orders-p0-0", "orders--0", "orders-p-", "orders-", "orders-a-b-12", "other-p-0", "-", ""} {
		f.Add(s)
	}
	d := &departed{cfg: &Config{AppID: "orders"}}
	f.Fuzz(func(t *testing.T, id string) {
		p, ok := d.process(id)
		if !ok {
			return
		}
		idx, found := strings.CutPrefix(id, "orders-"+p+"-")
		if !found || p == "" || idx == "" || strings.Trim(idx, "0123456789") != "" {
			t.Fatalf("%q parsed as process %q", id, p)
		}
	})
}
