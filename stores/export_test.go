package stores

import (
	"github.com/eddy-go/eddy/internal/storage"
	"github.com/eddy-go/eddy/serde"
)

// The runtime's side of the builders, as methods for this package's tests.

func (b *KeyValueBuilder[K, V]) Build(env storage.Env) (storage.Store, error) { return b.build(env) }
func (b *WindowBuilder[K, V]) Build(env storage.Env) (storage.Store, error)   { return b.build(env) }
func (b *SessionBuilder[K, V]) Build(env storage.Env) (storage.Store, error)  { return b.build(env) }

func (b *KeyValueBuilder[K, V]) Spec() storage.Spec { return b.storeSpec() }
func (b *WindowBuilder[K, V]) Spec() storage.Spec   { return b.storeSpec() }

func (b *KeyValueBuilder[K, V]) ReadOnly(bs storage.BytesStore, topic string) ReadOnlyKeyValueStore[K, V] {
	return b.view(bs, topic)
}

func (b *WindowBuilder[K, V]) ReadOnly(bs storage.BytesStore, topic string) ReadOnlyWindowStore[K, V] {
	return b.view(bs, topic)
}

func (b *SessionBuilder[K, V]) ReadOnly(bs storage.BytesStore, topic string) ReadOnlySessionStore[K, V] {
	return b.view(bs, topic)
}

// ReadOnlyKeyValue is a read-only typed view of the committed state of one
// store of one task in b.
func ReadOnlyKeyValue[K, V any](b storage.Backend, task, name, topic string, ks serde.Serde[K], vs serde.Serde[V]) ReadOnlyKeyValueStore[K, V] {
	return &kvStore[K, V]{name: name, topic: topic, under: storage.CommittedView(b, task, name), ks: ks, vs: vs}
}

func (b *VersionedKeyValueBuilder[K, V]) Build(env storage.Env) (storage.Store, error) {
	return b.build(env)
}

// SpecForTest is the store's spec, for restoring it in a test.
func (b *VersionedKeyValueBuilder[K, V]) SpecForTest() storage.Spec { return b.storeSpec() }

func (b *VersionedKeyValueBuilder[K, V]) Spec() storage.Spec { return b.storeSpec() }

func (b *VersionedKeyValueBuilder[K, V]) ReadOnly(bs storage.BytesStore, topic string) ReadOnlyVersionedKeyValueStore[K, V] {
	return b.view(bs, topic)
}
