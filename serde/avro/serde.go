package avro

import (
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/linkedin/goavro/v2"

	"github.com/eddy-go/eddy/serde/registry"
)

// SubjectStrategy names the registry subject a topic's schema lives under.
type SubjectStrategy = registry.SubjectStrategy

// The subject name strategies.
const (
	// TopicName: "<topic>-value" (or "<topic>-key"). The default.
	TopicName = registry.TopicName
	// RecordName: the record's full name, whatever the topic.
	RecordName = registry.RecordName
	// TopicRecordName: "<topic>-<record full name>".
	TopicRecordName = registry.TopicRecordName
)

// Option configures a Serde.
type Option func(*options)

type options struct{ registry.Options }

// ForKeys makes the serde for record keys: subjects "<topic>-key".
func ForKeys() Option { return func(o *options) { o.Key = true } }

// WithSubjectStrategy picks how subjects are named (default TopicName).
func WithSubjectStrategy(s SubjectStrategy) Option { return func(o *options) { o.Strategy = s } }

// UseLatestSchema writes with the latest schema registered under the
// subject instead of registering the serde's own; values are converted to
// it by Avro schema resolution.
func UseLatestSchema() Option { return func(o *options) { o.Mode = registry.Latest } }

// UseSchemaID writes with the registered schema id, without registering.
func UseSchemaID(id int) Option { return func(o *options) { o.Mode, o.ID = registry.PinnedID, id } }

// RegisterFor registers (or looks up, per the write mode) the writer
// schema of these topics when the serde is created, so a schema the
// registry refuses fails New instead of the first record.
func RegisterFor(topics ...string) Option {
	return func(o *options) { o.Topics = append(o.Topics, topics...) }
}

// Serde is an Avro serde in the Confluent wire format: a 0 magic byte, the
// 4-byte big-endian schema id, then the Avro binary encoding. T is a Go
// struct (fields matched by `avro:"name"` tags, else by name), a pointer to
// one, or map[string]any for generic records.
//
// Writing registers the serde's schema (or uses the latest, or a pinned
// id) once per subject; reading looks each writer schema up once by id and
// resolves it to the serde's schema, so one topology reads old and new
// versions of a record in one topic. After the first record of a schema no
// registry call is made.
type Serde[T any] struct {
	reg    *Registry
	text   string
	schema *schema
	codec  *goavro.Codec
	m      *mapping
	typ    reflect.Type
	opts   options

	mu sync.RWMutex
	// guarded by mu
	writers map[string]*writer // by subject
	readers map[int]resolver   // by writer schema id; nil: identical schema
}

// writer is how records of one subject are written: the schema id and
// codec, and the conversion from the serde's schema when they differ.
type writer struct {
	ws      *writerSchema
	convert resolver
	err     error // a refusal, remembered so it is not retried per record
}

// New returns a serde for T with the given Avro schema (JSON).
func New[T any](reg *Registry, schemaJSON string, opts ...Option) (*Serde[T], error) {
	if reg == nil {
		return nil, errors.New("avro: New needs a Registry")
	}
	parsed, err := parseSchema(schemaJSON)
	if err != nil {
		return nil, err
	}
	codec, err := goavro.NewCodec(schemaJSON)
	if err != nil {
		return nil, fmt.Errorf("avro: %w", err)
	}
	typ := reflect.TypeFor[T]()
	m, err := buildMapping(typ, parsed)
	if err != nil {
		return nil, err
	}
	s := &Serde[T]{reg: reg, text: schemaJSON, schema: parsed, codec: codec, m: m, typ: typ,
		writers: map[string]*writer{}, readers: map[int]resolver{}}
	for _, o := range opts {
		o(&s.opts)
	}
	if (s.opts.Strategy == RecordName || s.opts.Strategy == TopicRecordName) && parsed.kind != kRecord {
		return nil, errors.New("avro: RecordName subject strategies need a record schema")
	}
	for _, t := range s.opts.Topics {
		if w := s.writerFor(t); w.err != nil {
			return nil, w.err
		}
	}
	return s, nil
}

// Subject returns the registry subject of topic under the serde's
// strategy.
func (s *Serde[T]) Subject(topic string) string {
	return s.opts.Subject(topic, s.schema.name)
}

func (s *Serde[T]) writerFor(topic string) *writer {
	subject := s.Subject(topic)
	s.mu.RLock()
	w, ok := s.writers[subject]
	s.mu.RUnlock()
	if ok {
		return w
	}
	w = &writer{}
	var ws *writerSchema
	var err error
	switch s.opts.Mode {
	case registry.Latest:
		ws, err = s.reg.latest(subject)
	case registry.PinnedID:
		ws, err = s.reg.schemaByID(s.opts.ID)
	default:
		ws, err = s.reg.register(subject, s.text)
	}
	switch {
	case err != nil:
		w.err = err
	case ws.codec.CanonicalSchema() == s.codec.CanonicalSchema():
		w.ws = ws
	default:
		w.ws = ws
		if w.convert, err = buildResolver(s.schema, ws.schema); err != nil {
			w.err = fmt.Errorf("avro: values of the serde's schema cannot be written as schema id %d of subject %q: %w", ws.id, subject, err)
		}
	}
	if registry.Final(w.err) {
		s.mu.Lock()
		s.writers[subject] = w
		s.mu.Unlock()
	}
	return w
}

// Serialize implements serde.Serde.
func (s *Serde[T]) Serialize(topic string, v T) ([]byte, error) {
	w := s.writerFor(topic)
	if w.err != nil {
		return nil, w.err
	}
	native, err := s.m.enc(reflect.ValueOf(&v).Elem())
	if err != nil {
		return nil, fmt.Errorf("avro: encoding %s: %w", s.typ, err)
	}
	if w.convert != nil {
		if native, err = w.convert(native); err != nil {
			return nil, fmt.Errorf("avro: converting to schema id %d: %w", w.ws.id, err)
		}
	}
	out, err := w.ws.codec.BinaryFromNative(registry.AppendHeader(make([]byte, 0, 64), w.ws.id), native)
	if err != nil {
		return nil, fmt.Errorf("avro: encoding %s: %w", s.typ, err)
	}
	return out, nil
}

// ErrWireFormat reports bytes that are not in the Confluent wire format.
var ErrWireFormat = registry.ErrWireFormat

// Deserialize implements serde.Serde.
func (s *Serde[T]) Deserialize(_ string, data []byte) (T, error) {
	var zero T
	id, payload, err := registry.ParseHeader(data)
	if err != nil {
		return zero, err
	}
	ws, err := s.reg.schemaByID(id)
	if err != nil {
		return zero, err
	}
	if err := checkBinary(ws.schema, payload); err != nil {
		return zero, fmt.Errorf("avro: decoding with schema id %d: %w", id, err)
	}
	native, rest, err := ws.codec.NativeFromBinary(payload)
	if err != nil {
		return zero, fmt.Errorf("avro: decoding with schema id %d: %w", id, err)
	}
	if len(rest) != 0 {
		return zero, fmt.Errorf("avro: %d bytes left after decoding with schema id %d", len(rest), id)
	}
	res, err := s.reader(ws)
	if err != nil {
		return zero, err
	}
	if res != nil {
		if native, err = res(native); err != nil {
			return zero, fmt.Errorf("avro: resolving schema id %d to the reader's schema: %w", id, err)
		}
	}
	var out T
	if err := s.m.dec(native, reflect.ValueOf(&out).Elem()); err != nil {
		return zero, fmt.Errorf("avro: decoding into %s: %w", s.typ, err)
	}
	return out, nil
}

func (s *Serde[T]) reader(ws *writerSchema) (resolver, error) {
	s.mu.RLock()
	res, ok := s.readers[ws.id]
	s.mu.RUnlock()
	if ok {
		return res, nil
	}
	if ws.codec.CanonicalSchema() != s.codec.CanonicalSchema() {
		var err error
		if res, err = buildResolver(ws.schema, s.schema); err != nil {
			return nil, fmt.Errorf("avro: records of schema id %d cannot be read with the serde's schema: %w", ws.id, err)
		}
	}
	s.mu.Lock()
	s.readers[ws.id] = res
	s.mu.Unlock()
	return res, nil
}
