package topology

import (
	"bytes"
	"testing"

	"github.com/eddy-go/eddy/serde"
)

// The spread aggregations' serdes read bytes from repartition topics and
// changelogs: any bytes give a value or an error, never a panic, and what
// they read writes back to the same bytes.
func FuzzSpreadSerdes(f *testing.F) {
	ps := partialsSerde[int64]{serde.Int64()}
	ss := saltedSerde[string]{serde.String()}
	seed, _ := ps.Serialize("t", partials[int64]{0: 5, 3: -1})
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	salted, _ := ss.Serialize("t", salted[string]{Key: "hot", Salt: 7})
	f.Add(salted)
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := ps.Deserialize("t", b); err == nil {
			again, err := ps.Serialize("t", p)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("partials %v read from %x write %x, %v", p, b, again, err)
			}
		}
		if s, err := ss.Deserialize("t", b); err == nil {
			again, err := ss.Serialize("t", s)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("salted %v read from %x write %x, %v", s, b, again, err)
			}
		}
	})
}
