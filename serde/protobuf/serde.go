package protobuf

import (
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/eddy-go/eddy/serde/registry"
)

// Option configures a Serde.
type Option func(*options)

type options struct{ registry.Options }

// ForKeys makes the serde for record keys: subjects "<topic>-key".
func ForKeys() Option { return func(o *options) { o.Key = true } }

// WithSubjectStrategy picks how subjects are named (default
// registry.TopicName; RecordName and TopicRecordName use the message's
// full name, e.g. "shop.Order").
func WithSubjectStrategy(s registry.SubjectStrategy) Option {
	return func(o *options) { o.Strategy = s }
}

// UseLatestSchema writes with the latest schema registered under the
// subject instead of registering the serde's own (Confluent's
// use.latest.version with auto.register.schemas off). The message is found
// in that schema by its full name.
func UseLatestSchema() Option { return func(o *options) { o.Mode = registry.Latest } }

// UseSchemaID writes with the registered schema id, without registering.
func UseSchemaID(id int) Option { return func(o *options) { o.Mode, o.ID = registry.PinnedID, id } }

// RegisterFor registers (or looks up, per the write mode) the writer
// schema of these topics when the serde is created, so a schema the
// registry refuses fails New instead of the first record.
func RegisterFor(topics ...string) Option {
	return func(o *options) { o.Topics = append(o.Topics, topics...) }
}

// Serde is a Protobuf serde in the Confluent wire format. T is a generated
// message type (a pointer, e.g. *orderpb.Order) for New, or proto.Message
// for NewDynamic.
//
// Writing registers the message's .proto file under the subject of its
// strategy once, each imported file under its import path as a schema
// reference (the well-known types excepted: registries have them built
// in), and writes the header, the message indexes and the message.
// Reading checks that the record's message (found in its writer schema,
// looked up once per id) is the serde's, then decodes it: fields added or
// removed by a compatible change are read as Protobuf reads them (unknown
// fields kept, missing ones zero).
type Serde[T proto.Message] struct {
	reg   *registry.Client
	files *files
	opts  options
	// md is the serde's message (nil for NewDynamic: each value's own).
	md      protoreflect.MessageDescriptor
	newT    func() T
	dynamic bool

	mu sync.RWMutex
	// guarded by mu
	writers map[writerKey]*writer
	schemas map[int]*readSchema // by writer schema id
}

type writerKey struct {
	subject string
	message protoreflect.FullName
}

// writer is how records of one subject and message are written: their
// header (magic byte, id, message indexes), or the refusal.
type writer struct {
	header []byte
	err    error
}

// readSchema is a writer schema compiled for reading.
type readSchema struct {
	fd  protoreflect.FileDescriptor
	err error
}

// New returns a serde for the generated message type T.
func New[T proto.Message](reg *registry.Client, opts ...Option) (*Serde[T], error) {
	var zero T
	md := zero.ProtoReflect().Descriptor()
	mt := zero.ProtoReflect().Type()
	s, err := newSerde[T](reg, md, opts)
	if err != nil {
		return nil, err
	}
	s.newT = func() T { return mt.New().Interface().(T) }
	if err := s.registerFor(md); err != nil {
		return nil, err
	}
	return s, nil
}

// NewDynamic returns a serde for messages without a generated type, as
// *dynamicpb.Message values. With a descriptor md (from a compiled .proto,
// protocompile for one), records are read as md, the reader's schema, like
// a generated type; with nil, each record is read as its writer schema's
// message, whatever it is. Serialize writes any proto.Message under its
// own descriptor. RegisterFor needs md.
func NewDynamic(reg *registry.Client, md protoreflect.MessageDescriptor, opts ...Option) (*Serde[proto.Message], error) {
	s, err := newSerde[proto.Message](reg, md, opts)
	if err != nil {
		return nil, err
	}
	s.dynamic = true
	if md == nil {
		if len(s.opts.Topics) > 0 {
			return nil, errors.New("protobuf: RegisterFor needs the message descriptor")
		}
		return s, nil
	}
	if err := s.registerFor(md); err != nil {
		return nil, err
	}
	return s, nil
}

func newSerde[T proto.Message](reg *registry.Client, md protoreflect.MessageDescriptor, opts []Option) (*Serde[T], error) {
	if reg == nil {
		return nil, errors.New("protobuf: the serde needs a registry client")
	}
	s := &Serde[T]{reg: reg, files: &files{reg: reg, done: map[string]registry.Reference{}}, md: md,
		writers: map[writerKey]*writer{}, schemas: map[int]*readSchema{}}
	for _, o := range opts {
		o(&s.opts)
	}
	return s, nil
}

func (s *Serde[T]) registerFor(md protoreflect.MessageDescriptor) error {
	for _, t := range s.opts.Topics {
		if w := s.writerFor(t, md); w.err != nil {
			return w.err
		}
	}
	return nil
}

// Subject returns the registry subject of topic's records of message md
// under the serde's strategy.
func (s *Serde[T]) Subject(topic string, md protoreflect.MessageDescriptor) string {
	return s.opts.Subject(topic, string(md.FullName()))
}

func (s *Serde[T]) writerFor(topic string, md protoreflect.MessageDescriptor) *writer {
	k := writerKey{s.Subject(topic, md), md.FullName()}
	s.mu.RLock()
	w, ok := s.writers[k]
	s.mu.RUnlock()
	if ok {
		return w
	}
	w = &writer{}
	var id int
	indexes := messageIndexes(md)
	var err error
	switch s.opts.Mode {
	case registry.Latest, registry.PinnedID:
		id, indexes, err = s.registered(k.subject, md)
	default:
		id, err = s.register(k.subject, md)
	}
	if err != nil {
		w.err = err
	} else {
		w.header = appendIndexes(registry.AppendHeader(nil, id), indexes)
	}
	if registry.Final(w.err) {
		s.mu.Lock()
		s.writers[k] = w
		s.mu.Unlock()
	}
	return w
}

// register registers md's file (and what it imports) under subject.
func (s *Serde[T]) register(subject string, md protoreflect.MessageDescriptor) (int, error) {
	fd := md.ParentFile()
	refs, err := s.files.references(fd)
	if err != nil {
		return 0, err
	}
	text, err := printFile(fd)
	if err != nil {
		return 0, err
	}
	reg, err := s.reg.Register(subject, registry.Protobuf, text, refs...)
	if err != nil {
		return 0, fmt.Errorf("protobuf: %w", err)
	}
	return reg.ID, nil
}

// registered finds the schema to write with (the subject's latest, or the
// pinned id) and md's message indexes in it.
func (s *Serde[T]) registered(subject string, md protoreflect.MessageDescriptor) (int, []int, error) {
	id := s.opts.ID
	if s.opts.Mode == registry.Latest {
		latest, err := s.reg.Latest(subject)
		if err != nil {
			return 0, nil, fmt.Errorf("protobuf: %w", err)
		}
		id = latest.ID
	}
	fd, err := s.schema(id)
	if err != nil {
		return 0, nil, err
	}
	found := findMessage(fd, md.FullName())
	if found == nil {
		return 0, nil, fmt.Errorf("protobuf: schema id %d (subject %q) has no message %s", id, subject, md.FullName())
	}
	return id, messageIndexes(found), nil
}

// schema returns the writer schema id compiled, from memory after the
// first lookup.
func (s *Serde[T]) schema(id int) (protoreflect.FileDescriptor, error) {
	s.mu.RLock()
	rs, ok := s.schemas[id]
	s.mu.RUnlock()
	if ok {
		return rs.fd, rs.err
	}
	rs = &readSchema{}
	reg, err := s.reg.ByID(id)
	if err != nil {
		// Not remembered: the registry may answer next time.
		return nil, fmt.Errorf("protobuf: %w", err)
	}
	if reg.Type != registry.Protobuf {
		rs.err = fmt.Errorf("protobuf: schema id %d is a %s schema, not PROTOBUF", id, reg.Type)
	} else {
		rs.fd, rs.err = compile(s.reg, reg)
	}
	s.mu.Lock()
	s.schemas[id] = rs
	s.mu.Unlock()
	return rs.fd, rs.err
}

// Serialize implements serde.Serde. A nil message is Kafka's null (a
// tombstone).
func (s *Serde[T]) Serialize(topic string, v T) ([]byte, error) {
	if any(v) == nil {
		return nil, nil
	}
	m := v.ProtoReflect()
	if !m.IsValid() {
		return nil, nil
	}
	w := s.writerFor(topic, m.Descriptor())
	if w.err != nil {
		return nil, w.err
	}
	// MarshalAppend sizes the message itself and grows the buffer once.
	out, err := proto.MarshalOptions{}.MarshalAppend(w.header[:len(w.header):len(w.header)], v)
	if err != nil {
		return nil, fmt.Errorf("protobuf: encoding %s: %w", m.Descriptor().FullName(), err)
	}
	return out, nil
}

// Deserialize implements serde.Serde.
func (s *Serde[T]) Deserialize(_ string, data []byte) (T, error) {
	var zero T
	id, payload, err := registry.ParseHeader(data)
	if err != nil {
		return zero, err
	}
	indexes, body, err := readIndexes(payload)
	if err != nil {
		return zero, err
	}
	fd, err := s.schema(id)
	if err != nil {
		return zero, err
	}
	md, err := messageAt(fd, indexes)
	if err != nil {
		return zero, fmt.Errorf("protobuf: schema id %d: %w", id, err)
	}
	if s.md != nil && md.FullName() != s.md.FullName() {
		return zero, fmt.Errorf("protobuf: the record holds a %s (schema id %d, message indexes %v), the serde reads %s", md.FullName(), id, indexes, s.md.FullName())
	}
	var out T
	switch {
	case !s.dynamic:
		out = s.newT()
	case s.md != nil:
		out = any(dynamicpb.NewMessage(s.md)).(T)
	default:
		out = any(dynamicpb.NewMessage(md)).(T)
	}
	if err := unmarshal(body, out); err != nil {
		return zero, fmt.Errorf("protobuf: decoding %s (schema id %d): %w", md.FullName(), id, err)
	}
	return out, nil
}

// unmarshal is proto.Unmarshal, with a panic in it (protobuf-go's reflective
// decoder, which dynamic messages take, panics on some damaged map
// entries) returned as an error: a bad record is the error handler's, it
// never ends the app.
func unmarshal(body []byte, m proto.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("damaged message: %v", p)
		}
	}()
	return proto.Unmarshal(body, m)
}
