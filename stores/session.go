package stores

import (
	"bytes"
	"time"

	"github.com/eddy-go/eddy/internal/storage"

	"github.com/eddy-go/eddy/serde"
)

// SessionStore is a typed store of session windows per key.
type SessionStore[K, V any] interface {
	Name() string
	// Put writes key's session [start, end].
	Put(key K, start, end int64, value V) error
	// Remove deletes key's session [start, end].
	Remove(key K, start, end int64) error
	// FindSessions returns key's sessions that end at or after earliestEnd
	// and start at or before latestStart, ignoring sessions past the
	// retention at streamTime, ordered by end then start.
	FindSessions(key K, earliestEnd, latestStart, streamTime int64) ([]KeyWindowEntry[K, V], error)
	// FetchAll returns every session ending in [from, to], ordered by end,
	// then serialized key.
	FetchAll(from, to int64) ([]KeyWindowEntry[K, V], error)
	ExpireBefore(streamTime int64) error
	// EmittedUpTo and SetEmittedUpTo keep, with the store, the end of the
	// last session whose final result was emitted (EmitOnWindowClose).
	EmittedUpTo() (int64, bool, error)
	SetEmittedUpTo(end int64) error
}

type sessionStore[K, V any] struct {
	windowStore[K, V] // shares layout helpers, layers and expiry
}

func (s *sessionStore[K, V]) sessionKey(kb []byte, start, end int64) []byte {
	b := appendTime(s.keys.buf[:0], s.keys.seg(end))
	b = append(b, kb...)
	b = appendTime(b, end)
	b = appendTime(b, start)
	s.keys.buf = b
	return b
}

func (s *sessionStore[K, V]) Put(key K, start, end int64, value V) error {
	kb, err := s.ks.Serialize(s.topic, key)
	if err != nil {
		return err
	}
	vb, err := s.vs.Serialize(s.topic, value)
	if err != nil {
		return err
	}
	return s.under.Put(s.sessionKey(kb, start, end), vb)
}

func (s *sessionStore[K, V]) Remove(key K, start, end int64) error {
	kb, err := s.ks.Serialize(s.topic, key)
	if err != nil {
		return err
	}
	return s.under.Delete(s.sessionKey(kb, start, end))
}

func (s *sessionStore[K, V]) FindSessions(key K, earliestEnd, latestStart, streamTime int64) ([]KeyWindowEntry[K, V], error) {
	kb, err := s.ks.Serialize(s.topic, key)
	if err != nil {
		return nil, err
	}
	earliestEnd = max(earliestEnd, streamTime-s.retention+1, 0)
	var out []KeyWindowEntry[K, V]
	// A session ending up to latestStart+gap may start early enough; scan
	// the key's sessions from earliestEnd in every segment up to the last.
	for seg := max(s.keys.seg(earliestEnd), s.expired); seg <= s.keys.seg(max(streamTime, latestStart)+s.retention); seg++ {
		prefix := append(appendTime(nil, seg), kb...)
		lo := appendTime(append([]byte{}, prefix...), earliestEnd)
		it := s.under.Iter(lo, storage.PrefixEnd(prefix), false)
		for it.Next() {
			k, start, end, ok := storage.ParseSessionKey(it.Key())
			if !ok || string(k) != string(kb) || end < earliestEnd || start > latestStart {
				continue
			}
			v, err := s.vs.Deserialize(s.topic, it.Value())
			if err != nil {
				it.Close()
				return nil, err
			}
			out = append(out, KeyWindowEntry[K, V]{Key: key, Start: start, End: end, Value: v})
		}
		err := it.Err()
		it.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *sessionStore[K, V]) FetchAll(from, to int64) ([]KeyWindowEntry[K, V], error) {
	var out []KeyWindowEntry[K, V]
	var keys [][]byte
	it := s.under.Iter(appendTime(nil, max(s.keys.seg(from), s.expired)), appendTime(nil, s.keys.seg(to)+1), false)
	defer it.Close()
	for it.Next() {
		kb, start, end, ok := storage.ParseSessionKey(it.Key())
		if !ok || end < from || end > to {
			continue
		}
		k, err := s.ks.Deserialize(s.topic, kb)
		if err != nil {
			return nil, err
		}
		v, err := s.vs.Deserialize(s.topic, it.Value())
		if err != nil {
			return nil, err
		}
		out = append(out, KeyWindowEntry[K, V]{Key: k, Start: start, End: end, Value: v})
		keys = append(keys, bytes.Clone(kb))
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	return timeOrdered(out, keys, func(e *KeyWindowEntry[K, V]) int64 { return e.End }), nil
}

// SessionBuilder builds session stores. Logged and persistent by default.
type SessionBuilder[K, V any] struct {
	WindowBuilder[K, V]
}

// Session returns a builder for the session store name.
func Session[K, V any](name string, ks serde.Serde[K], vs serde.Serde[V], retention time.Duration) *SessionBuilder[K, V] {
	b := &SessionBuilder[K, V]{*Window(name, ks, vs, retention)}
	b.spec.Kind = storage.KindSession
	return b
}

// TimestampedSession is Session with values carrying their timestamp.
func TimestampedSession[K, V any](name string, ks serde.Serde[K], vs serde.Serde[V], retention time.Duration) *SessionBuilder[K, ValueAndTimestamp[V]] {
	b := Session(name, ks, TimestampedSerde(vs), retention)
	b.spec.Timestamped = true
	return b
}

// WithCaching turns the record cache on or off.
func (b *SessionBuilder[K, V]) WithCaching(on bool) *SessionBuilder[K, V] {
	b.spec.Cached = on
	return b
}

// WithLogging turns the changelog on or off.
func (b *SessionBuilder[K, V]) WithLogging(on bool, config map[string]string) *SessionBuilder[K, V] {
	b.WindowBuilder.WithLogging(on, config)
	return b
}

// InMemory keeps the store in the Memory backend.
func (b *SessionBuilder[K, V]) InMemory(on bool) *SessionBuilder[K, V] {
	b.spec.InMemory = on
	return b
}

func (b *SessionBuilder[K, V]) build(env storage.Env) (storage.Store, error) {
	w, err := b.buildWindows(env)
	if err != nil {
		return nil, err
	}
	return &sessionStore[K, V]{*w}, nil
}
