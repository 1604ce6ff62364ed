package storage

import (
	"bytes"
	"sync"

	"github.com/RaduBerinde/btreemap"
)

// Memory is an in-memory Backend: a B-tree behind a read-write mutex. Its
// data does not survive Close; stores on it restore fully from their
// changelogs on every start.
type Memory struct {
	mu sync.RWMutex
	// guarded by mu
	tree   *btreemap.BTreeMap[[]byte, []byte]
	closed bool
}

// NewMemory returns an empty in-memory backend.
func NewMemory() *Memory {
	return &Memory{tree: btreemap.New[[]byte, []byte](32, bytes.Compare)}
}

// Get implements Backend.
func (m *Memory) Get(key []byte) ([]byte, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, false, ErrClosed
	}
	_, v, ok := m.tree.Get(key)
	if !ok {
		return nil, false, nil
	}
	return bytes.Clone(v), true, nil
}

// Iter implements Backend. The iterator walks a snapshot of the range taken
// when it is created.
func (m *Memory) Iter(lower, upper []byte, reverse bool) BytesIterator {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return &sliceIter{err: ErrClosed}
	}
	lo, hi := btreemap.Min[[]byte](), btreemap.Max[[]byte]()
	if lower != nil {
		lo = btreemap.GE(lower)
	}
	if upper != nil {
		hi = btreemap.LT(upper)
	}
	var kvs []kv
	if reverse {
		for k, v := range m.tree.Descend(hi, lo) {
			kvs = append(kvs, kv{k, v})
		}
	} else {
		for k, v := range m.tree.Ascend(lo, hi) {
			kvs = append(kvs, kv{k, v})
		}
	}
	return &sliceIter{kvs: kvs, i: -1}
}

// Apply implements Backend.
func (m *Memory) Apply(b *Batch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for _, op := range b.ops {
		switch op.kind {
		case opSet:
			m.tree.ReplaceOrInsert(bytes.Clone(op.key), bytes.Clone(op.value))
		case opDelete:
			m.tree.Delete(op.key)
		case opDeleteRange:
			var doomed [][]byte
			for k := range m.tree.Ascend(btreemap.GE(op.key), btreemap.LT(op.value)) {
				doomed = append(doomed, k)
			}
			for _, k := range doomed {
				m.tree.Delete(k)
			}
		}
	}
	return nil
}

// Flush implements Backend; memory needs none.
func (m *Memory) Flush() error { return nil }

// Persistent implements Backend: false.
func (m *Memory) Persistent() bool { return false }

// Close implements Backend and drops the data.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.tree = nil
	return nil
}

type kv struct{ k, v []byte }

// sliceIter iterates a slice of key-value pairs.
type sliceIter struct {
	kvs []kv
	i   int
	err error
}

func (s *sliceIter) Next() bool {
	if s.err != nil {
		return false
	}
	s.i++
	return s.i < len(s.kvs)
}
func (s *sliceIter) Key() []byte   { return s.kvs[s.i].k }
func (s *sliceIter) Value() []byte { return s.kvs[s.i].v }
func (s *sliceIter) Err() error    { return s.err }
func (s *sliceIter) Close() error  { return nil }

// ErrIterator returns an iterator that yields nothing and reports err.
func ErrIterator(err error) BytesIterator { return &sliceIter{err: err} }
