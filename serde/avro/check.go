package avro

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// checkBinary walks Avro binary data against its writer's schema before
// the codec decodes it, refusing what would make the codec allocate or
// loop without bound: an array or map block count larger than the bytes
// left could hold (the codec sizes its slice or map by the count before
// reading an item; a fuzzer's 40-byte record asked for a map of hundreds
// of millions of entries, seconds and gigabytes), lengths past the end,
// enum and union indexes out of range, nesting deeper than maxDepth. It
// returns what it found wrong and where.
func checkBinary(s *schema, b []byte) error {
	c := binChecker{b: b}
	if err := c.value(s, 0); err != nil {
		return fmt.Errorf("at byte %d: %w", c.at, err)
	}
	return nil
}

// maxDepth bounds the nesting of records, arrays, maps and unions.
const maxDepth = 200

// maxZeroSizeItems bounds a block of items that take no bytes (nulls,
// empty records): nothing in the data bounds their count.
const maxZeroSizeItems = 1 << 16

type binChecker struct {
	b  []byte
	at int
}

var errShort = errors.New("the data ends early")

func (c *binChecker) varint() (int64, error) {
	v, n := binary.Varint(c.b[c.at:])
	if n <= 0 {
		if n == 0 {
			return 0, errShort
		}
		return 0, errors.New("a number longer than 64 bits")
	}
	c.at += n
	return v, nil
}

func (c *binChecker) skip(n int64) error {
	if n < 0 || n > int64(len(c.b)-c.at) {
		return fmt.Errorf("a length of %d with %d bytes left", n, len(c.b)-c.at)
	}
	c.at += int(n)
	return nil
}

func (c *binChecker) value(s *schema, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested deeper than %d", maxDepth)
	}
	switch s.kind {
	case kNull:
		return nil
	case kBoolean:
		return c.skip(1)
	case kInt, kLong:
		_, err := c.varint()
		return err
	case kFloat:
		return c.skip(4)
	case kDouble:
		return c.skip(8)
	case kBytes, kString:
		n, err := c.varint()
		if err != nil {
			return err
		}
		return c.skip(n)
	case kFixed:
		return c.skip(int64(s.size))
	case kEnum:
		i, err := c.varint()
		if err != nil {
			return err
		}
		if i < 0 || i >= int64(len(s.symbols)) {
			return fmt.Errorf("enum %s index %d of %d symbols", s.name, i, len(s.symbols))
		}
		return nil
	case kUnion:
		i, err := c.varint()
		if err != nil {
			return err
		}
		if i < 0 || i >= int64(len(s.branches)) {
			return fmt.Errorf("union index %d of %d branches", i, len(s.branches))
		}
		return c.value(s.branches[i], depth+1)
	case kRecord:
		for _, f := range s.fields {
			if err := c.value(f.typ, depth+1); err != nil {
				return fmt.Errorf("field %q: %w", f.name, err)
			}
		}
		return nil
	case kArray:
		return c.blocks(func() error { return c.value(s.items, depth+1) }, minSize(s.items, 0))
	case kMap:
		return c.blocks(func() error {
			n, err := c.varint() // the key
			if err != nil {
				return err
			}
			if err := c.skip(n); err != nil {
				return err
			}
			return c.value(s.values, depth+1)
		}, 1+minSize(s.values, 0))
	}
	return fmt.Errorf("unknown Avro type %v", s.kind)
}

// blocks checks an array's or map's blocks, each item with item; min is
// the fewest bytes an item takes.
func (c *binChecker) blocks(item func() error, min int) error {
	for {
		count, err := c.varint()
		if err != nil {
			return err
		}
		if count == 0 {
			return nil
		}
		if count < 0 {
			count = -count
			if _, err := c.varint(); err != nil { // the block's size in bytes
				return err
			}
		}
		left := int64(len(c.b) - c.at)
		switch {
		case count < 0: // -minInt64
			return fmt.Errorf("a block of %d items", count)
		case min > 0 && count > left/int64(min):
			return fmt.Errorf("a block of %d items with %d bytes left", count, left)
		case min == 0 && count > maxZeroSizeItems:
			return fmt.Errorf("a block of %d items of no bytes (at most %d)", count, maxZeroSizeItems)
		}
		for range count {
			if err := item(); err != nil {
				return err
			}
		}
	}
}

// minSize is the fewest bytes a value of s takes.
func minSize(s *schema, depth int) int {
	if depth > maxDepth {
		return 0
	}
	switch s.kind {
	case kBoolean, kInt, kLong, kBytes, kString, kEnum, kUnion, kArray, kMap:
		return 1
	case kFloat:
		return 4
	case kDouble:
		return 8
	case kFixed:
		return s.size
	case kRecord:
		n := 0
		for _, f := range s.fields {
			n += minSize(f.typ, depth+1)
		}
		return n
	}
	return 0
}
