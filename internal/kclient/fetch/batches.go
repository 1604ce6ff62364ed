package fetch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/processor"
)

// The fetcher decodes record batches (message format v2, the only one
// Kafka 4 writes) itself, straight into the records it hands over:
// kgo.ProcessFetchPartition builds a kgo.Record per record first (~250
// bytes each, then copied into an rt.RawRecord), which made decoding the
// largest cost of a restore (measured: a 10M-record cold restore spent 38%
// of its CPU in the fetch goroutine, most of it there, plus the garbage
// collection it caused). A partition's data holding an older message
// format goes through kgo.ProcessFetchPartition as before.

// Record batch v2 header: the offsets of its fields, and its length.
const (
	batchLengthAt     = 8  // int32: the bytes after this field
	batchMagicAt      = 16 // int8
	batchCRCAt        = 17 // uint32, CRC-32C of everything after it
	batchAttrsAt      = 21 // int16
	batchLastDeltaAt  = 23 // int32
	batchFirstTimeAt  = 27 // int64
	batchMaxTimeAt    = 35 // int64
	batchProducerAt   = 43 // int64
	batchCountAt      = 57 // int32
	batchHeaderLength = 61
	attrCompression   = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
	controlTypeAbort  = 0  // a control record's type (key bytes 2–3): abort
	batchMinLength    = 17 // offset, length, and the byte that says the format (all formats)
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// errOldFormat says a partition's data holds batches of message format 0
// or 1: decode it with kgo.ProcessFetchPartition.
var errOldFormat = errors.New("message format before v2")

// batchDecoder decodes the record batches of one partition of a fetch
// response from offset from on: what a consumer returns (no control
// records; under read_committed no records of aborted transactions), and
// the offset to fetch next. A batch cut short at the end of the data (the
// broker fills a response up to its size limit) ends the decoding; the
// next fetch starts at it.
type batchDecoder struct {
	topic         string
	partition     int32
	readCommitted bool
	own           bool
	decompressor  kgo.Decompressor
}

// decode appends to dst what p holds from offset from on and returns it
// with the offset to fetch next (from if p held nothing complete).
func (d *batchDecoder) decode(dst []rt.RawRecord, p *kmsg.FetchResponseTopicPartition, from int64) ([]rt.RawRecord, int64, error) {
	in := p.RecordBatches
	n, _, err := scanBatches(in, from)
	if err != nil {
		return dst, from, err
	}
	var aborted map[int64][]int64 // producer → first offsets of its aborted transactions, ascending
	if d.readCommitted && len(p.AbortedTransactions) > 0 {
		aborted = make(map[int64][]int64, len(p.AbortedTransactions))
		for _, a := range p.AbortedTransactions {
			aborted[a.ProducerID] = append(aborted[a.ProducerID], a.FirstOffset)
		}
		for _, offs := range aborted {
			slices.Sort(offs)
		}
	}
	if dst == nil && n > 0 {
		dst = make([]rt.RawRecord, 0, n)
	}
	next := from
	for b, rest, ok := splitBatch(in); ok; b, rest, ok = splitBatch(rest) {
		base, last := batchOffsets(b)
		if last < next {
			continue // wholly before the offset asked for
		}
		if want, got := binary.BigEndian.Uint32(b[batchCRCAt:]), crc32.Checksum(b[batchAttrsAt:], crc32c); want != got {
			return dst, next, fmt.Errorf("record batch at offset %d: CRC %08x, computed %08x (corrupt data)", base, want, got)
		}
		attrs := binary.BigEndian.Uint16(b[batchAttrsAt:])
		count := int32(binary.BigEndian.Uint32(b[batchCountAt:]))
		if count < 0 {
			return dst, next, fmt.Errorf("record batch at offset %d: negative record count %d", base, count)
		}
		producer := int64(binary.BigEndian.Uint64(b[batchProducerAt:]))
		abort := false
		if attrs&attrTransactional != 0 && aborted != nil {
			if offs := aborted[producer]; len(offs) > 0 && base >= offs[0] {
				abort = true
			}
		}
		if attrs&attrControl != 0 {
			// One marker ends one transaction of its producer: an abort
			// marker ends the aborted one the batches before it were in.
			if abort && isAbortMarker(b[batchHeaderLength:], attrs) {
				if offs := aborted[producer][1:]; len(offs) == 0 {
					delete(aborted, producer)
				} else {
					aborted[producer] = offs
				}
			}
			next = last + 1
			continue
		}
		if abort || count == 0 {
			next = last + 1
			continue
		}
		recs := b[batchHeaderLength:]
		if codec := attrs & attrCompression; codec != 0 {
			if recs, err = d.decompressor.Decompress(recs, kgo.CompressionCodecType(codec)); err != nil {
				return dst, next, fmt.Errorf("record batch at offset %d: decompressing (codec %d): %w", base, codec, err)
			}
		}
		firstTime := int64(binary.BigEndian.Uint64(b[batchFirstTimeAt:]))
		logTime := int64(-1)
		if attrs&attrLogAppendTime != 0 {
			logTime = int64(binary.BigEndian.Uint64(b[batchMaxTimeAt:]))
		}
		if dst, err = d.records(dst, recs, count, base, last, next, firstTime, logTime); err != nil {
			return dst, next, err
		}
		next = last + 1
	}
	return dst, next, nil
}

// records appends a batch's count records at or after offset from. Their
// offsets must ascend within the batch's (base to last): a batch that
// says otherwise is corrupt, whatever its CRC.
func (d *batchDecoder) records(dst []rt.RawRecord, in []byte, count int32, base, last, from, firstTime, logTime int64) ([]rt.RawRecord, error) {
	prev := base - 1
	for i := range count {
		length, used := kbin.Varint(in)
		end := used + int(length)
		if used <= 0 || length < 0 || len(in) < end {
			return dst, fmt.Errorf("record batch at offset %d: record %d of %d is cut short", base, i, count)
		}
		r := kbin.Reader{Src: in[used:end]}
		in = in[end:]
		r.Int8() // attributes: none defined
		timeDelta := r.Varlong()
		offset := base + int64(r.Varint())
		key := r.VarintBytes()
		value := r.VarintBytes()
		var headers processor.Headers
		if n := r.VarintArrayLen(); n > 0 {
			headers = make(processor.Headers, 0, min(int(n), len(r.Src)))
			for range n {
				headers = append(headers, processor.Header{Key: r.VarintString(), Value: r.VarintBytes()})
			}
		}
		if !r.Ok() {
			return dst, fmt.Errorf("record batch at offset %d: record %d of %d does not decode", base, i, count)
		}
		if offset <= prev || offset > last {
			return dst, fmt.Errorf("record batch at offset %d: record %d of %d has offset %d, outside %d–%d or not after the one before (corrupt data)",
				base, i, count, offset, prev+1, last)
		}
		prev = offset
		if offset < from {
			continue
		}
		ts := logTime
		if ts < 0 {
			ts = firstTime + timeDelta
		}
		if d.own {
			key, value = ownBytes(key, value)
		}
		dst = append(dst, rt.RawRecord{Topic: d.topic, Partition: d.partition, Offset: offset,
			Key: key, Value: value, Timestamp: ts, Headers: headers})
	}
	return dst, nil
}

// ownBytes copies key and value into one allocation of their own (nil
// stays nil).
func ownBytes(key, value []byte) ([]byte, []byte) {
	b := make([]byte, len(key)+len(value))
	n := copy(b, value)
	copy(b[n:], key)
	if value != nil {
		value = b[:n:n]
	}
	if key != nil {
		key = b[n:]
	}
	return key, value
}

// isAbortMarker reports whether a control batch's records (compressed
// or not: a control batch is never compressed) start with an abort marker:
// a control record's key is a version (int16) and a type (int16).
func isAbortMarker(recs []byte, attrs uint16) bool {
	if attrs&attrCompression != 0 {
		return false
	}
	length, used := kbin.Varint(recs)
	if used <= 0 || length < 0 || len(recs) < used+int(length) {
		return false
	}
	r := kbin.Reader{Src: recs[used : used+int(length)]}
	r.Int8()
	r.Varlong()
	r.Varint()
	key := r.VarintBytes()
	return r.Ok() && len(key) >= 4 && binary.BigEndian.Uint16(key[2:]) == controlTypeAbort
}

// splitBatch splits the first complete batch off in; ok is false when in
// holds none (it is empty, or the batch is cut short by the response's
// size limit).
func splitBatch(in []byte) (b, rest []byte, ok bool) {
	if len(in) < batchMinLength {
		return nil, in, false
	}
	size := int64(int32(binary.BigEndian.Uint32(in[batchLengthAt:]))) + 12
	if size < batchMinLength || int64(len(in)) < size {
		return nil, in, false
	}
	return in[:size], in[size:], true
}

// batchOffsets returns the offsets of a v2 batch's first and last records.
func batchOffsets(b []byte) (base, last int64) {
	base = int64(binary.BigEndian.Uint64(b))
	return base, base + int64(int32(binary.BigEndian.Uint32(b[batchLastDeltaAt:])))
}

// nextOffset returns the offset to fetch after the complete batches of
// data, read from offset from, from their headers alone: what decode
// returns for data that decodes.
func nextOffset(in []byte, from int64) int64 {
	_, next, _ := scanBatches(in, from)
	return next
}

// scanBatches reads the headers of data's complete batches, read from
// offset from: how many records they may hold (control batches left out;
// a count off the wire bounds nothing, so at most one record a byte, or 64
// a byte compressed) — one allocation holds them all, where growing a
// slice of records (~150 bytes each) batch by batch would copy them over
// and over — and the offset after them. errOldFormat if a batch is of
// message format 0 or 1, an error for an unknown format or a v2 batch too
// short for its header.
func scanBatches(in []byte, from int64) (records int, next int64, err error) {
	next = from
	for b, rest, ok := splitBatch(in); ok; b, rest, ok = splitBatch(rest) {
		switch magic := b[batchMagicAt]; {
		case magic == 0 || magic == 1:
			return 0, from, errOldFormat
		case magic != 2:
			return 0, from, fmt.Errorf("record batch at offset %d: unknown message format %d", int64(binary.BigEndian.Uint64(b)), magic)
		case len(b) < batchHeaderLength:
			return 0, from, fmt.Errorf("record batch at offset %d: %d bytes, shorter than its header", int64(binary.BigEndian.Uint64(b)), len(b))
		}
		_, last := batchOffsets(b)
		if last < next {
			continue
		}
		next = last + 1
		if attrs := binary.BigEndian.Uint16(b[batchAttrsAt:]); attrs&attrControl == 0 {
			bound := int64(len(b))
			if attrs&attrCompression != 0 {
				bound *= 64
			}
			records += int(max(0, min(int64(int32(binary.BigEndian.Uint32(b[batchCountAt:]))), bound)))
		}
	}
	return records, next, nil
}
