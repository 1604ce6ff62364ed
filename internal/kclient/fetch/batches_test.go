package fetch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddy-go/eddy/internal/kclient"
)

// testRecord is one record of a test batch; its offset and timestamp are
// deltas from the batch's.
type testRecord struct {
	offDelta, tsDelta int64
	key, value        []byte
	headers           [][2]string
}

// testBatch is a record batch (message format v2) as a broker returns it.
type testBatch struct {
	base         int64
	attrs        uint16 // compression codec, timestamp type, transactional, control
	lastDelta    int32
	firstTs      int64
	maxTs        int64
	producer     int64
	recs         []testRecord
	corruptCRC   bool
	claimedCount int32 // when > 0, the record count written instead of len(recs)
	compressWith kgo.CompressionCodec
}

func appendTestRecord(dst []byte, r testRecord) []byte {
	var body []byte
	body = append(body, 0) // attributes
	body = kbin.AppendVarlong(body, r.tsDelta)
	body = kbin.AppendVarint(body, int32(r.offDelta))
	body = kbin.AppendVarintBytes(body, r.key)
	body = kbin.AppendVarintBytes(body, r.value)
	body = kbin.AppendVarint(body, int32(len(r.headers)))
	for _, h := range r.headers {
		body = kbin.AppendVarintString(body, h[0])
		body = kbin.AppendVarintBytes(body, []byte(h[1]))
	}
	dst = kbin.AppendVarint(dst, int32(len(body)))
	return append(dst, body...)
}

func (b testBatch) appendTo(t testing.TB, dst []byte) []byte {
	t.Helper()
	var recs []byte
	for _, r := range b.recs {
		recs = appendTestRecord(recs, r)
	}
	if codec := b.attrs & attrCompression; codec != 0 {
		c, err := kgo.DefaultCompressor(b.compressWith)
		if err != nil {
			t.Fatal(err)
		}
		out, typ := c.Compress(&bytes.Buffer{}, recs)
		if uint16(typ) != codec {
			t.Fatalf("compressed with codec %d, want %d", typ, codec)
		}
		recs = append([]byte(nil), out...)
	}
	count := int32(len(b.recs))
	if b.claimedCount > 0 {
		count = b.claimedCount
	}
	h := make([]byte, batchHeaderLength)
	binary.BigEndian.PutUint64(h, uint64(b.base))
	binary.BigEndian.PutUint32(h[batchLengthAt:], uint32(batchHeaderLength-12+len(recs)))
	h[batchMagicAt] = 2
	binary.BigEndian.PutUint16(h[batchAttrsAt:], b.attrs)
	binary.BigEndian.PutUint32(h[batchLastDeltaAt:], uint32(b.lastDelta))
	binary.BigEndian.PutUint64(h[batchFirstTimeAt:], uint64(b.firstTs))
	binary.BigEndian.PutUint64(h[batchMaxTimeAt:], uint64(b.maxTs))
	binary.BigEndian.PutUint64(h[batchProducerAt:], uint64(b.producer))
	binary.BigEndian.PutUint32(h[batchCountAt:], uint32(count))
	whole := append(h, recs...)
	crc := crc32.Checksum(whole[batchAttrsAt:], crc32.MakeTable(crc32.Castagnoli))
	if b.corruptCRC {
		crc++
	}
	binary.BigEndian.PutUint32(whole[batchCRCAt:], crc)
	return append(dst, whole...)
}

func rec(off int64, key, value string, headers ...[2]string) testRecord {
	r := testRecord{offDelta: off, tsDelta: off * 10, headers: headers}
	if key != "<nil>" {
		r.key = []byte(key)
	}
	if value != "<nil>" {
		r.value = []byte(value)
	}
	return r
}

// marker is a control batch of one record: type 0 aborts, 1 commits.
func marker(base, producer int64, typ uint16) testBatch {
	key := make([]byte, 4)
	binary.BigEndian.PutUint16(key[2:], typ)
	return testBatch{base: base, attrs: attrTransactional | attrControl, producer: producer, firstTs: 1,
		recs: []testRecord{{key: key, value: []byte{0, 0, 0, 0, 0, 0}}}}
}

type decodeCase struct {
	name          string
	batches       []testBatch
	aborted       map[int64]int64 // producer → first offset of its aborted transaction
	from          int64
	readCommitted bool
	cut           int // bytes cut off the end of the data
	wantOffsets   []int64
	wantNext      int64
	wantErr       string
}

func decodeCases() []decodeCase {
	plain := testBatch{base: 100, lastDelta: 3, firstTs: 1_000, maxTs: 1_030, producer: -1, recs: []testRecord{
		rec(0, "k0", "v0", [2]string{"h", "1"}, [2]string{"g", ""}),
		rec(1, "<nil>", "v1"),
		rec(2, "k2", "<nil>"),
		rec(3, "", ""),
	}}
	second := testBatch{base: 104, lastDelta: 1, firstTs: 2_000, maxTs: 2_010, producer: -1, recs: []testRecord{rec(0, "k4", "v4"), rec(1, "k5", "v5")}}
	var cases []decodeCase
	cases = append(cases,
		decodeCase{name: "plain", batches: []testBatch{plain, second}, from: 100, wantOffsets: []int64{100, 101, 102, 103, 104, 105}, wantNext: 106},
		decodeCase{name: "from inside a batch", batches: []testBatch{plain, second}, from: 102, wantOffsets: []int64{102, 103, 104, 105}, wantNext: 106},
		decodeCase{name: "from past a batch", batches: []testBatch{plain, second}, from: 105, wantOffsets: []int64{105}, wantNext: 106},
		decodeCase{name: "last batch cut short", batches: []testBatch{plain, second}, from: 100, cut: 5, wantOffsets: []int64{100, 101, 102, 103}, wantNext: 104},
		decodeCase{name: "only a partial batch", batches: []testBatch{plain}, from: 100, cut: 20, wantNext: 100},
		decodeCase{name: "log append time", batches: []testBatch{{base: 7, lastDelta: 1, firstTs: 5, maxTs: 99, attrs: attrLogAppendTime, producer: -1,
			recs: []testRecord{rec(0, "a", "1"), rec(1, "b", "2")}}}, from: 7, wantOffsets: []int64{7, 8}, wantNext: 9},
		decodeCase{name: "compacted away", batches: []testBatch{{base: 10, lastDelta: 4, producer: -1}, second}, from: 10, wantOffsets: []int64{104, 105}, wantNext: 106},
		decodeCase{name: "compacted gap inside a batch", batches: []testBatch{{base: 10, lastDelta: 9, firstTs: 1, producer: -1,
			recs: []testRecord{rec(2, "a", "1"), rec(5, "b", "2")}}}, from: 10, wantOffsets: []int64{12, 15}, wantNext: 20},
		decodeCase{name: "corrupt", batches: []testBatch{plain, {base: 104, lastDelta: 1, producer: -1, corruptCRC: true, recs: second.recs}}, from: 100, wantErr: "CRC"},
	)
	for _, c := range []struct {
		name  string
		codec kgo.CompressionCodec
		attr  uint16
	}{{"gzip", kgo.GzipCompression(), 1}, {"snappy", kgo.SnappyCompression(), 2}, {"lz4", kgo.Lz4Compression(), 3}, {"zstd", kgo.ZstdCompression(), 4}} {
		b := plain
		b.attrs, b.compressWith = c.attr, c.codec
		cases = append(cases, decodeCase{name: c.name, batches: []testBatch{b, second}, from: 101, wantOffsets: []int64{101, 102, 103, 104, 105}, wantNext: 106})
	}
	// Producer 7's transaction at 10–11 aborts (marker at 14); producer
	// 8's at 12–13 commits (marker at 15); producer 7's next one (16)
	// commits (marker at 17); a non-transactional batch at 18.
	txn := func(base, producer int64, keys ...string) testBatch {
		b := testBatch{base: base, lastDelta: int32(len(keys) - 1), attrs: attrTransactional, producer: producer, firstTs: 1}
		for i, k := range keys {
			b.recs = append(b.recs, rec(int64(i), k, "v"))
		}
		return b
	}
	txns := []testBatch{txn(10, 7, "a", "b"), txn(12, 8, "c", "d"), marker(14, 7, 0), marker(15, 8, 1), txn(16, 7, "e"), marker(17, 7, 1),
		{base: 18, producer: -1, firstTs: 1, recs: []testRecord{rec(0, "f", "v")}}}
	cases = append(cases,
		decodeCase{name: "read_committed", batches: txns, aborted: map[int64]int64{7: 10}, from: 10, readCommitted: true,
			wantOffsets: []int64{12, 13, 16, 18}, wantNext: 19},
		decodeCase{name: "read_uncommitted", batches: txns, aborted: map[int64]int64{7: 10}, from: 10,
			wantOffsets: []int64{10, 11, 12, 13, 16, 18}, wantNext: 19},
		decodeCase{name: "read_committed from the abort marker", batches: txns[2:], aborted: map[int64]int64{7: 10}, from: 14, readCommitted: true,
			wantOffsets: []int64{16, 18}, wantNext: 19},
	)
	return cases
}

func (c decodeCase) partition(t testing.TB) *kmsg.FetchResponseTopicPartition {
	p := kmsg.NewFetchResponseTopicPartition()
	p.Partition = 3
	for _, b := range c.batches {
		p.RecordBatches = b.appendTo(t, p.RecordBatches)
	}
	p.RecordBatches = p.RecordBatches[:len(p.RecordBatches)-c.cut]
	for producer, first := range c.aborted {
		a := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
		a.ProducerID, a.FirstOffset = producer, first
		p.AbortedTransactions = append(p.AbortedTransactions, a)
	}
	return &p
}

// The fetcher's own decoding returns what a consumer must: what franz-go's
// (the reference it replaced) returns, record for record, and the offsets
// each case names.
func TestDecodeBatches(t *testing.T) {
	for _, c := range decodeCases() {
		for _, own := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/own=%v", c.name, own), func(t *testing.T) {
				p := c.partition(t)
				d := batchDecoder{topic: "t", partition: 3, readCommitted: c.readCommitted, own: own, decompressor: kgo.DefaultDecompressor()}
				got, next, err := d.decode(nil, p, c.from)
				if c.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), c.wantErr) {
						t.Fatalf("error %v, want one saying %q", err, c.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				var offsets []int64
				for _, r := range got {
					offsets = append(offsets, r.Offset)
				}
				if ahead := nextOffset(p.RecordBatches, c.from); ahead != next {
					t.Errorf("next offset from the headers %d, decoded %d", ahead, next)
				}
				if !reflect.DeepEqual(offsets, c.wantOffsets) || next != c.wantNext {
					t.Fatalf("offsets %v, next %d; want %v, %d", offsets, next, c.wantOffsets, c.wantNext)
				}
				iso := kgo.ReadUncommitted()
				if c.readCommitted {
					iso = kgo.ReadCommitted()
				}
				fp, refNext := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: c.from, IsolationLevel: iso, Topic: "t", Partition: 3},
					c.partition(t), kgo.DefaultDecompressor(), nil)
				if fp.Err != nil {
					t.Fatal(fp.Err)
				}
				want := rawRecords(fp.Records, own)
				if len(want) == 0 {
					want = nil
				}
				if !reflect.DeepEqual(got, want) || next != refNext {
					t.Errorf("decoded\n%+v next %d\nfranz-go\n%+v next %d", got, next, want, refNext)
				}
			})
		}
	}
}

// A partition holding an older message format is decoded the old way.
func TestDecodeOldFormat(t *testing.T) {
	m := kmsg.MessageV1{Offset: 5, Magic: 1, Timestamp: 1, Key: []byte("k"), Value: []byte("v")}
	body := m.AppendTo(nil)
	binary.BigEndian.PutUint32(body[8:], uint32(len(body)-12))
	binary.BigEndian.PutUint32(body[12:], crc32.ChecksumIEEE(body[16:]))
	p := kmsg.NewFetchResponseTopicPartition()
	p.RecordBatches = body
	d := batchDecoder{topic: "t", decompressor: kgo.DefaultDecompressor()}
	if _, _, err := d.decode(nil, &p, 5); err != errOldFormat {
		t.Fatalf("decode: %v, want errOldFormat", err)
	}
	f := &fetcher{decompressor: kgo.DefaultDecompressor()}
	recs, next, err := f.decode(kclient.TP{Topic: "t"}, &p, 5)
	if err != nil || len(recs) != 1 || string(recs[0].Key) != "k" || string(recs[0].Value) != "v" || recs[0].Offset != 5 || next != 6 {
		t.Fatalf("fetcher.decode: %+v next %d err %v; want record k=v at 5, next 6", recs, next, err)
	}
}

// BenchmarkDecode compares decoding a fetch response's share of a
// partition (1 MiB of small changelog records) with franz-go's
// ProcessFetchPartition followed by the conversion it needed.
func BenchmarkDecode(b *testing.B) {
	var data []byte
	t := &testing.T{}
	n := 0
	for base := int64(0); len(data) < 1<<20; base += 100 {
		tb := testBatch{base: base, lastDelta: 99, firstTs: 1, producer: -1, attrs: 2, compressWith: kgo.SnappyCompression()}
		for i := range 100 {
			tb.recs = append(tb.recs, rec(int64(i), fmt.Sprintf("key-%010d", int(base)+i), "\x00\x00\x00\x00\x00\x00\x00\x01"))
		}
		data = tb.appendTo(t, data)
		n += 100
	}
	p := kmsg.NewFetchResponseTopicPartition()
	p.RecordBatches = data
	b.Run("eddy", func(b *testing.B) {
		d := batchDecoder{topic: "t", decompressor: kgo.DefaultDecompressor()}
		for b.Loop() {
			recs, _, err := d.decode(nil, &p, 0)
			if err != nil || len(recs) != n {
				b.Fatal(err, len(recs))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
	})
	b.Run("franz-go", func(b *testing.B) {
		for b.Loop() {
			fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: "t"}, &p, kgo.DefaultDecompressor(), nil)
			if recs := rawRecords(fp.Records, false); len(recs) != n {
				b.Fatal(len(recs))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
	})
}
