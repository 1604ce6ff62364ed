package fetch

import (
	"encoding/binary"
	"hash/crc32"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The fetcher's batch decoder reads bytes off the network: on any input it
// returns records or an error, never panics, and what it returns holds
// together — offsets ascending from the offset asked for, the next offset
// the one the batch headers say, the same records whether it copies their
// bytes or not. With fixCRC the input's batches get valid checksums first,
// so that the fuzzer reaches the record parsing behind the CRC check.
func FuzzDecodeBatches(f *testing.F) {
	for _, c := range decodeCases() {
		f.Add(c.partition(f).RecordBatches, c.from, c.readCommitted, false)
	}
	f.Add([]byte{}, int64(0), false, true)
	f.Fuzz(func(t *testing.T, in []byte, from int64, readCommitted, fixCRC bool) {
		if fixCRC {
			in = withValidCRCs(in)
		}
		p := kmsg.NewFetchResponseTopicPartition()
		p.RecordBatches = in
		a := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
		a.ProducerID, a.FirstOffset = 7, 10
		p.AbortedTransactions = append(p.AbortedTransactions, a)
		var got [2][]int64
		for i, own := range []bool{false, true} {
			d := batchDecoder{topic: "t", partition: 1, readCommitted: readCommitted, own: own, decompressor: kgo.DefaultDecompressor()}
			recs, next, err := d.decode(nil, &p, from)
			if next < from {
				t.Fatalf("next offset %d before the offset asked for %d", next, from)
			}
			prev := from - 1
			for _, r := range recs {
				if r.Offset <= prev {
					t.Fatalf("offset %d after %d (from %d)", r.Offset, prev, from)
				}
				if r.Offset < from {
					t.Fatalf("offset %d before the offset asked for %d", r.Offset, from)
				}
				prev = r.Offset
				got[i] = append(got[i], r.Offset)
			}
			if err == nil && next != nextOffset(in, from) {
				t.Fatalf("next offset %d, the headers say %d", next, nextOffset(in, from))
			}
		}
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Fatalf("offsets %v with the fetch's bytes, %v with copies", got[0], got[1])
		}
	})
}

// withValidCRCs returns in with the CRC of each complete v2 batch set to
// what its bytes hash to.
func withValidCRCs(in []byte) []byte {
	out := append([]byte(nil), in...)
	rest := out
	for b, r, ok := splitBatch(rest); ok; b, r, ok = splitBatch(r) {
		if len(b) >= batchHeaderLength {
			binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchAttrsAt:], crc32c))
		}
	}
	return out
}
