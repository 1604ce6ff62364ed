package streamstest_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/eddy-go/eddy/processor"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// refusingSerde fails every record the way a serde whose schema registry
// refuses the credentials does.
type refusingSerde struct{}

func (refusingSerde) Serialize(string, string) ([]byte, error) { return nil, errors.New("unused") }
func (refusingSerde) Deserialize(string, []byte) (string, error) {
	return "", fmt.Errorf("registry answered HTTP 401: %w", serde.ErrSetup)
}

// An error that is the serde's, not the record's (serde.ErrSetup), stops
// processing even when the handler would skip or dead-letter bad records:
// every record would fail alike, and none may be lost to the handler.
func TestSetupErrorsBypassTheRecordHandler(t *testing.T) {
	b := topology.NewBuilder()
	topology.Stream(b, "in", topology.Consumed(serde.String(), serde.Serde[string](refusingSerde{}))).
		To("out", topology.Produced(serde.String(), serde.String()))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	handled := 0
	d, err := streamstest.Open(top, streamstest.Options{OnError: func(*processor.RecordError) processor.ErrorAction {
		handled++
		return processor.Continue
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in := streamstest.Input(d, "in", serde.String(), serde.String())
	err = in.PipeBytes([]byte("k"), []byte("v"), 1)
	if !errors.Is(err, serde.ErrSetup) {
		t.Fatalf("PipeBytes: %v, want the serde's set-up error", err)
	}
	if _, skipped, dead := d.Counters(); handled != 0 || skipped != 0 || dead != 0 {
		t.Fatalf("the handler saw %d records (%d skipped, %d dead-lettered), want none", handled, skipped, dead)
	}
}
