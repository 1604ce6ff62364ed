package storage

import "bytes"

// CommittedViews returns a read-only BytesStore over the committed state
// of one store across several tasks: Get answers from the first task that
// has the key, iterations merge the tasks' keys in order.
func CommittedViews(b Backend, tasks []string, store string) BytesStore {
	m := &mergedView{}
	for _, t := range tasks {
		m.parts = append(m.parts, CommittedView(b, t, store))
	}
	return m
}

type mergedView struct{ parts []BytesStore }

func (m *mergedView) Get(key []byte) ([]byte, bool, error) {
	for _, p := range m.parts {
		if v, ok, err := p.Get(key); err != nil || ok {
			return v, ok, err
		}
	}
	return nil, false, nil
}
func (m *mergedView) Put(key, value []byte) error { return ErrReadOnly }
func (m *mergedView) Delete(key []byte) error     { return ErrReadOnly }
func (m *mergedView) Flush() error                { return nil }

func (m *mergedView) ApproximateNumEntries() (int64, error) {
	var n int64
	for _, p := range m.parts {
		c, err := p.ApproximateNumEntries()
		if err != nil {
			return n, err
		}
		n += c
	}
	return n, nil
}

func (m *mergedView) Iter(lower, upper []byte, reverse bool) BytesIterator {
	mi := &mergedIter{reverse: reverse, cur: -1}
	for _, p := range m.parts {
		it := p.Iter(lower, upper, reverse)
		mi.its = append(mi.its, it)
		mi.has = append(mi.has, false)
	}
	for i, it := range mi.its {
		mi.has[i] = it.Next()
		if err := it.Err(); err != nil && mi.err == nil {
			mi.err = err
		}
	}
	return mi
}

// mergedIter merges ordered iterators over disjoint key sets.
type mergedIter struct {
	its     []BytesIterator
	has     []bool // its[i] is positioned on an entry
	cur     int
	reverse bool
	started bool
	err     error
}

func (m *mergedIter) Next() bool {
	if m.err != nil {
		return false
	}
	if m.started && m.cur >= 0 {
		it := m.its[m.cur]
		m.has[m.cur] = it.Next()
		if err := it.Err(); err != nil {
			m.err = err
			return false
		}
	}
	m.started = true
	m.cur = -1
	for i, it := range m.its {
		if !m.has[i] {
			continue
		}
		if m.cur < 0 {
			m.cur = i
			continue
		}
		c := bytes.Compare(it.Key(), m.its[m.cur].Key())
		if (c < 0) != m.reverse && c != 0 {
			m.cur = i
		}
	}
	return m.cur >= 0
}

func (m *mergedIter) Key() []byte   { return m.its[m.cur].Key() }
func (m *mergedIter) Value() []byte { return m.its[m.cur].Value() }
func (m *mergedIter) Err() error    { return m.err }

func (m *mergedIter) Close() error {
	var first error
	for _, it := range m.its {
		if err := it.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
