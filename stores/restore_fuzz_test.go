package stores_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/eddy-go/eddy/internal/storage"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/stores"
)

// A changelog is read into a store as it is (restore trusts its bytes):
// whatever records it holds — keys too short for a window or session key,
// values shorter than a timestamp — the stores read from it (key-value with
// and without timestamps and a time to live, window, session, versioned)
// give values or errors through every query, never a panic.
func FuzzRestoredStoresRead(f *testing.F) {
	f.Add([]byte("\x03abc\x08\x00\x00\x00\x00\x00\x00\x00\x05\x10key\x00\x00\x00\x00\x00\x00\x00\x01\xff"))
	f.Add([]byte("\x18k\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte{0, 0, 1, 'x', 2, 'a', 'b'})
	// A versioned store's version entry of key "k" (start 5, latest), then
	// one whose start is cut short.
	f.Add([]byte("\x0ev\x00\x00\x00\x01k\x80\x00\x00\x00\x00\x00\x00\x05\x11\x7f\xff\xff\xff\xff\xff\xff\xff\x01\x00\x00\x00\x00\x00\x00\x00\x07" +
		"\x09v\x00\x00\x00\x01k\x80\x00\x00\x02ab"))
	str, i64 := serde.String(), serde.Int64()
	kv := stores.KeyValue("kv", str, i64)
	tkv := stores.TimestampedKeyValue("tkv", str, i64)
	ttl := stores.KeyValue("ttl", str, i64).WithTTL(time.Hour)
	win := stores.Window("win", str, i64, time.Hour)
	twin := stores.TimestampedWindow("twin", str, i64, time.Hour)
	ses := stores.Session("ses", str, i64, time.Hour)
	ver := stores.VersionedKeyValue("ver", str, i64, time.Hour)
	f.Fuzz(func(t *testing.T, in []byte) {
		recs := changelogRecords(in)
		b := storage.NewMemory()
		for _, spec := range []storage.Spec{kv.Spec(), tkv.Spec(), ttl.Spec(), win.Spec(), twin.Spec(), ses.Spec(), ver.Spec()} {
			if err := storage.Restore(b, "0_0", spec, recs, int64(len(recs))); err != nil {
				return // a restore may refuse what it cannot store; it must not panic
			}
		}
		view := func(name string) storage.BytesStore { return storage.CommittedView(b, "0_0", name) }
		for _, s := range []stores.ReadOnlyKeyValueStore[string, int64]{kv.ReadOnly(view("kv"), "t"), ttl.ReadOnly(view("ttl"), "t")} {
			readAll(s.All())
			readAll(s.ReverseRange("a", "z"))
			s.Get("key")
			s.ApproximateNumEntries()
		}
		readAll(tkv.ReadOnly(view("tkv"), "t").All())
		// The versioned store's entries are 'v' len key start: read the keys
		// the records name after such a prefix, and a few others.
		vs := ver.ReadOnly(view("ver"), "t")
		keys := []string{"", "k", "key"}
		for _, r := range recs {
			if len(r.Key) >= 5 && r.Key[0] == 'v' {
				if n := int(binary.BigEndian.Uint32(r.Key[1:5])); n <= len(r.Key)-5 {
					keys = append(keys, string(r.Key[5:5+n]))
				}
			}
		}
		for _, k := range keys {
			vs.Get(k)
			for _, at := range []int64{-1 << 62, 0, 1, 1 << 40} {
				vs.GetAsOf(k, at)
			}
			vs.Versions(k, -1<<62, 1<<62, true)
			vs.Versions(k, 0, 10, false)
		}
		for _, w := range []func() error{
			func() error { _, err := win.ReadOnly(view("win"), "t").FetchAll(-1<<62, 1<<62); return err },
			func() error { _, err := win.ReadOnly(view("win"), "t").FetchRange("key", 0, 1<<40); return err },
			func() error { _, _, err := win.ReadOnly(view("win"), "t").Fetch("k", 0); return err },
			func() error { _, err := twin.ReadOnly(view("twin"), "t").FetchAll(-1<<62, 1<<62); return err },
			func() error { _, err := ses.ReadOnly(view("ses"), "t").FetchAll(-1<<62, 1<<62); return err },
			func() error { _, err := ses.ReadOnly(view("ses"), "t").FetchSessions("k"); return err },
		} {
			_ = w()
		}
	})
}

// changelogRecords splits in into records: a length byte and that many
// key bytes, then a length byte (0xff: a tombstone) and the value, the
// timestamp the record's index.
func changelogRecords(in []byte) []storage.ChangelogRecord {
	var recs []storage.ChangelogRecord
	next := func(n int) []byte {
		n = min(n, len(in))
		b := in[:n]
		in = in[n:]
		return b
	}
	for len(in) > 0 {
		r := storage.ChangelogRecord{Key: next(int(next(1)[0])), Timestamp: int64(len(recs))}
		if len(in) > 0 {
			if n := next(1)[0]; n != 0xff {
				r.Value = append([]byte{}, next(int(n))...)
			}
		}
		recs = append(recs, r)
	}
	return recs
}

func readAll[K, V any](it *stores.Iterator[K, V]) {
	defer it.Close()
	for it.Next() {
	}
}
