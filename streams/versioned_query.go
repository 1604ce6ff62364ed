package streams

import (
	"fmt"

	"github.com/eddy-go/eddy/internal/storage"
	"github.com/eddy-go/eddy/stores"
)

// VersionedKeyValueStoreOf returns a read-only view of the versioned store
// name (a table materialized WithVersioned, or a stores.VersionedKeyValue
// store) over the tasks this instance owns, reading committed data only:
// a key's latest value, its value as of a time (Kafka Streams'
// VersionedKeyQuery), and its versions within a time range
// (MultiVersionedKeyQuery). Reads fail and keys owned elsewhere are not
// found as with KeyValueStoreOf; over HTTP, GET
// /stores/{store}/keys/{key}?asOf=T answers as of T from any instance.
func VersionedKeyValueStoreOf[K, V any](a *App, name string, opts ...QueryOption) (stores.ReadOnlyVersionedKeyValueStore[K, V], error) {
	o := queryOpts(opts)
	s, err := a.storeOf(name, storage.KindKeyValue)
	if err != nil {
		return nil, err
	}
	if _, ok := s.Builder.Public().(*stores.VersionedKeyValueBuilder[K, V]); !ok {
		var k K
		var v V
		return nil, fmt.Errorf("streams: store %q is not a versioned store of %T keys and %T values (its builder is %T)", name, k, v, s.Builder.Public())
	}
	open := opener[stores.ReadOnlyVersionedKeyValueStore[K, V]](s.Builder)
	return &versionedQuery[K, V]{
		acquire: func() (stores.ReadOnlyVersionedKeyValueStore[K, V], func(), error) {
			bs, release, err := a.view(s, nil, false, o.stale)
			if err != nil {
				return nil, nil, err
			}
			return open(bs, a.storeTopic(s)), release, nil
		},
		check: func(key K) error { return a.checkKeyTask(s, key, o) },
	}, nil
}

// versionedQuery reads a versioned store through a fresh view per read.
type versionedQuery[K, V any] struct {
	acquire func() (stores.ReadOnlyVersionedKeyValueStore[K, V], func(), error)
	check   func(key K) error
}

func (q *versionedQuery[K, V]) with(key K, f func(stores.ReadOnlyVersionedKeyValueStore[K, V]) error) error {
	if err := q.check(key); err != nil {
		return err
	}
	s, release, err := q.acquire()
	if err != nil {
		return err
	}
	defer release()
	return f(s)
}

func (q *versionedQuery[K, V]) Get(key K) (r stores.VersionedRecord[V], ok bool, err error) {
	err = q.with(key, func(s stores.ReadOnlyVersionedKeyValueStore[K, V]) (err error) {
		r, ok, err = s.Get(key)
		return err
	})
	return r, ok, err
}

func (q *versionedQuery[K, V]) GetAsOf(key K, asOf int64) (r stores.VersionedRecord[V], ok bool, err error) {
	err = q.with(key, func(s stores.ReadOnlyVersionedKeyValueStore[K, V]) (err error) {
		r, ok, err = s.GetAsOf(key, asOf)
		return err
	})
	return r, ok, err
}

func (q *versionedQuery[K, V]) Versions(key K, from, to int64, ascending bool) (rs []stores.VersionedRecord[V], err error) {
	err = q.with(key, func(s stores.ReadOnlyVersionedKeyValueStore[K, V]) (err error) {
		rs, err = s.Versions(key, from, to, ascending)
		return err
	})
	return rs, err
}
