package jsonschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	js "github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/eddy-go/eddy/serde/registry"
)

// Option configures a Serde.
type Option func(*options)

type options struct {
	registry.Options
	schema   string
	validate bool
	reads    ReadCheck // 0: as validate says
	refs     []registry.Reference
	named    []namedSchema
}

// WithSchema gives the serde's JSON Schema (JSON text) instead of the one
// derived from T.
func WithSchema(schema string) Option { return func(o *options) { o.schema = schema } }

// Validate checks every record against its schema: a value before it is
// written, against the serde's schema; a record when it is read, against
// its writer schema (ValidateReads picks another). A record that fails is
// a *ValidationError naming each failing field: a serialization or
// deserialization error, which the app's error handlers see like any bad
// record (fail, continue, dead-letter topic). Off by default, as
// Confluent's json.fail.invalid.schema.
func Validate() Option { return func(o *options) { o.validate = true } }

// ReadCheck is what a record read is validated against.
type ReadCheck int

const (
	// AgainstWriter validates a record against the schema it was written
	// with (its schema id's): what Validate does, and what Confluent's
	// Java deserializer does with json.fail.invalid.schema.
	AgainstWriter ReadCheck = iota + 1
	// AgainstReader validates it against the serde's own schema: a record
	// whose writer's schema was laxer than the application's is refused
	// instead of decoded with zero values for what it lacks. What
	// Confluent's Python JSONDeserializer does when given a schema.
	AgainstReader
	// AgainstBoth validates it against both.
	AgainstBoth
)

// ValidateReads validates every record read against the schema check
// names (whether or not Validate is given; writes are validated only
// with Validate).
func ValidateReads(check ReadCheck) Option { return func(o *options) { o.reads = check } }

// ForKeys makes the serde for record keys: subjects "<topic>-key".
func ForKeys() Option { return func(o *options) { o.Key = true } }

// WithSubjectStrategy picks how subjects are named (default
// registry.TopicName; RecordName and TopicRecordName use the schema's
// "title", which a derived schema sets to the Go type's name).
func WithSubjectStrategy(s registry.SubjectStrategy) Option {
	return func(o *options) { o.Strategy = s }
}

// UseLatestSchema writes with the latest schema registered under the
// subject instead of registering the serde's own.
func UseLatestSchema() Option { return func(o *options) { o.Mode = registry.Latest } }

// UseSchemaID writes with the registered schema id, without registering.
func UseSchemaID(id int) Option { return func(o *options) { o.Mode, o.ID = registry.PinnedID, id } }

// RegisterFor registers (or looks up, per the write mode) the writer
// schema of these topics when the serde is created, so a schema the
// registry refuses fails New instead of the first record.
func RegisterFor(topics ...string) Option {
	return func(o *options) { o.Topics = append(o.Topics, topics...) }
}

// Serde is a JSON Schema serde in the Confluent wire format: the magic byte
// 0, the 4-byte schema id, then the value as encoding/json writes it. T is
// any type encoding/json handles (a struct, usually).
type Serde[T any] struct {
	reg    *registry.Client
	opts   options
	text   string
	title  string
	schema *js.Schema // the serde's own, compiled

	mu sync.RWMutex
	// guarded by mu
	writers    map[string]*writer    // by subject
	readers    map[int]*writerSchema // by writer schema id
	registered []registry.Reference  // the schema's references, once WithReferencedSchema's are registered
}

type writer struct {
	id     int
	schema *js.Schema // what values are validated against
	err    error
}

type writerSchema struct {
	schema *js.Schema
	err    error
}

// New returns a serde for T, with the schema WithSchema gives or else one
// derived from T (Derive).
func New[T any](reg *registry.Client, opts ...Option) (*Serde[T], error) {
	if reg == nil {
		return nil, errors.New("jsonschema: the serde needs a registry client")
	}
	s := &Serde[T]{reg: reg, writers: map[string]*writer{}, readers: map[int]*writerSchema{}}
	for _, o := range opts {
		o(&s.opts)
	}
	s.text = s.opts.schema
	if s.text == "" {
		text, err := Derive(reflect.TypeFor[T]())
		if err != nil {
			return nil, err
		}
		s.text = text
	}
	var meta struct {
		Title string `json:"title"`
	}
	if err := json.Unmarshal([]byte(s.text), &meta); err != nil {
		return nil, fmt.Errorf("jsonschema: the schema is not JSON: %w", err)
	}
	s.title = meta.Title
	if s.opts.Strategy != registry.TopicName && s.title == "" {
		return nil, errors.New("jsonschema: RecordName subject strategies need a schema with a title")
	}
	if s.opts.reads != 0 && (s.opts.reads < AgainstWriter || s.opts.reads > AgainstBoth) {
		return nil, fmt.Errorf("jsonschema: ValidateReads(%d): want AgainstWriter, AgainstReader or AgainstBoth", s.opts.reads)
	}
	if s.opts.reads == 0 && s.opts.validate {
		s.opts.reads = AgainstWriter
	}
	compiled, err := s.compile("serde", s.text, s.opts.refs, s.opts.named)
	if err != nil {
		return nil, err
	}
	s.schema = compiled
	for _, t := range s.opts.Topics {
		if w := s.writerFor(t); w.err != nil {
			return nil, w.err
		}
	}
	return s, nil
}

// Schema returns the serde's JSON Schema text.
func (s *Serde[T]) Schema() string { return s.text }

// Subject returns the registry subject of topic under the serde's
// strategy.
func (s *Serde[T]) Subject(topic string) string {
	return s.opts.Subject(topic, s.title)
}

// compile compiles a schema with its references: registered ones looked
// up through the serde's registry client (cached there), and local ones by
// text.
func (s *Serde[T]) compile(name, text string, refs []registry.Reference, local []namedSchema) (*js.Schema, error) {
	set := newSchemaSet(func(r registry.Reference) (*registry.Schema, error) { return s.reg.Version(r.Subject, r.Version) })
	return set.compile(name, text, refs, local)
}

// references registers the schemas WithReferencedSchema gave, once, and
// returns the serde's schema's references.
func (s *Serde[T]) references() ([]registry.Reference, error) {
	if len(s.opts.named) == 0 {
		return s.opts.refs, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.registered != nil {
		return s.registered, nil
	}
	refs, err := registerReferenced(s.reg, s.text, s.opts.refs, s.opts.named)
	if err == nil {
		s.registered = refs
	}
	return refs, err
}

func (s *Serde[T]) writerFor(topic string) *writer {
	subject := s.Subject(topic)
	s.mu.RLock()
	w, ok := s.writers[subject]
	s.mu.RUnlock()
	if ok {
		return w
	}
	w = &writer{schema: s.schema}
	switch s.opts.Mode {
	case registry.Latest:
		latest, err := s.reg.Latest(subject)
		if err != nil {
			w.err = fmt.Errorf("jsonschema: %w", err)
		} else {
			w.id = latest.ID
			w.schema, w.err = s.writerSchema(latest.ID)
		}
	case registry.PinnedID:
		w.id = s.opts.ID
		w.schema, w.err = s.writerSchema(w.id)
	default:
		refs, err := s.references()
		if err != nil {
			w.err = err
			break
		}
		reg, err := s.reg.Register(subject, registry.JSON, s.text, refs...)
		if err != nil {
			w.err = fmt.Errorf("jsonschema: %w", err)
		} else {
			w.id = reg.ID
		}
	}
	if registry.Final(w.err) {
		s.mu.Lock()
		s.writers[subject] = w
		s.mu.Unlock()
	}
	return w
}

// writerSchema returns the registered schema id compiled, from memory
// after the first lookup.
func (s *Serde[T]) writerSchema(id int) (*js.Schema, error) {
	s.mu.RLock()
	ws, ok := s.readers[id]
	s.mu.RUnlock()
	if ok {
		return ws.schema, ws.err
	}
	reg, err := s.reg.ByID(id)
	if err != nil {
		return nil, fmt.Errorf("jsonschema: %w", err)
	}
	ws = &writerSchema{}
	if reg.Type != registry.JSON {
		ws.err = fmt.Errorf("jsonschema: schema id %d is a %s schema, not JSON", id, reg.Type)
	} else {
		ws.schema, ws.err = s.compile(fmt.Sprintf("id %d", id), reg.Text, reg.References, nil)
	}
	s.mu.Lock()
	s.readers[id] = ws
	s.mu.Unlock()
	return ws.schema, ws.err
}

// Serialize implements serde.Serde.
func (s *Serde[T]) Serialize(topic string, v T) ([]byte, error) {
	w := s.writerFor(topic)
	if w.err != nil {
		return nil, w.err
	}
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("jsonschema: encoding %T: %w", v, err)
	}
	if s.opts.validate {
		if err := validate(w.schema, body, w.id); err != nil {
			return nil, err
		}
	}
	return append(registry.AppendHeader(make([]byte, 0, 5+len(body)), w.id), body...), nil
}

// Deserialize implements serde.Serde.
func (s *Serde[T]) Deserialize(_ string, data []byte) (T, error) {
	var out T
	id, body, err := registry.ParseHeader(data)
	if err != nil {
		return out, err
	}
	if s.opts.reads == AgainstWriter || s.opts.reads == AgainstBoth {
		schema, err := s.writerSchema(id)
		if err != nil {
			return out, err
		}
		if err := validate(schema, body, id); err != nil {
			return out, err
		}
	}
	if s.opts.reads == AgainstReader || s.opts.reads == AgainstBoth {
		if err := validate(s.schema, body, 0); err != nil {
			return out, err
		}
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return out, decodeErr(reflect.TypeFor[T](), body, id, err)
	}
	return out, nil
}

// ValidationError is a record that does not satisfy its schema.
type ValidationError struct {
	// SchemaID is the schema checked against: the record's writer schema,
	// or 0 for the serde's own (ValidateReads(AgainstReader)).
	SchemaID int
	// Failures are the failing fields, as JSON pointers ("/items/0/price",
	// "" for the whole value), each with why.
	Failures []FieldError
}

// FieldError is one field failing the schema.
type FieldError struct {
	Path    string
	Message string
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	if e.SchemaID == 0 {
		b.WriteString("jsonschema: the record does not satisfy the serde's schema:")
	} else {
		fmt.Fprintf(&b, "jsonschema: the record does not satisfy schema id %d:", e.SchemaID)
	}
	for i, f := range e.Failures {
		if i > 0 {
			b.WriteString(";")
		}
		path := f.Path
		if path == "" {
			path = "/"
		}
		fmt.Fprintf(&b, " at %s: %s", path, f.Message)
	}
	return b.String()
}

func validate(schema *js.Schema, body []byte, id int) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("jsonschema: the record is not JSON: %w", err)
	}
	err := schema.Validate(doc)
	var ve *js.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	out := &ValidationError{SchemaID: id}
	var leaves func(e *js.ValidationError)
	leaves = func(e *js.ValidationError) {
		if len(e.Causes) == 0 {
			out.Failures = append(out.Failures, FieldError{Path: e.InstanceLocation, Message: e.Message})
		}
		for _, c := range e.Causes {
			leaves(c)
		}
	}
	leaves(ve)
	sort.SliceStable(out.Failures, func(i, j int) bool { return out.Failures[i].Path < out.Failures[j].Path })
	return out
}
