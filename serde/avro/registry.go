package avro

import (
	"fmt"
	"sync"

	"github.com/linkedin/goavro/v2"
	"github.com/riferrei/srclient"

	"github.com/eddy-go/eddy/serde/registry"
)

// RegistryConfig says how to reach a Confluent-compatible schema registry.
type RegistryConfig = registry.Config

// Registry is a schema registry client with the caches an Avro serde
// needs: a schema id is looked up once, then served from memory (parsed,
// with its codec), so a registry outage does not stop processing of
// schemas already seen. A Registry is safe for concurrent use and meant to
// be shared by all Avro serdes of an app; NewRegistryFrom shares one
// registry.Client with the Protobuf and JSON Schema serdes too.
type Registry struct {
	client *registry.Client

	mu sync.RWMutex
	// guarded by mu
	byID map[int]*writerSchema
}

// writerSchema is a schema as fetched by id: parsed, with its codec.
type writerSchema struct {
	id     int
	text   string
	schema *schema
	codec  *goavro.Codec
}

// NewRegistry returns a client of the registry cfg names.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	c, err := registry.New(cfg)
	if err != nil {
		return nil, err
	}
	return NewRegistryFrom(c), nil
}

// NewRegistryWithClient wraps an srclient client (srclient's mock in
// tests).
func NewRegistryWithClient(c srclient.ISchemaRegistryClient) *Registry {
	return NewRegistryFrom(registry.NewWithClient(c))
}

// NewRegistryFrom returns an Avro registry over a shared registry client.
func NewRegistryFrom(c *registry.Client) *Registry {
	return &Registry{client: c, byID: map[int]*writerSchema{}}
}

// schemaByID returns the schema with id, from memory after the first
// lookup.
func (r *Registry) schemaByID(id int) (*writerSchema, error) {
	r.mu.RLock()
	ws, ok := r.byID[id]
	r.mu.RUnlock()
	if ok {
		return ws, nil
	}
	s, err := r.client.ByID(id)
	if err != nil {
		return nil, fmt.Errorf("avro: %w", err)
	}
	return r.remember(id, s.Text)
}

func (r *Registry) remember(id int, text string) (*writerSchema, error) {
	parsed, err := parseSchema(text)
	if err != nil {
		return nil, fmt.Errorf("avro: schema id %d: %w", id, err)
	}
	codec, err := goavro.NewCodec(text)
	if err != nil {
		return nil, fmt.Errorf("avro: schema id %d: %w", id, err)
	}
	ws := &writerSchema{id: id, text: text, schema: parsed, codec: codec}
	r.mu.Lock()
	r.byID[id] = ws
	r.mu.Unlock()
	return ws, nil
}

// ErrUnauthorized is wrapped by the errors of registry requests refused
// for their credentials (HTTP 401) or their permissions (HTTP 403). It
// wraps serde.ErrSetup: a running app stops with it rather than treat the
// records as bad.
var ErrUnauthorized = registry.ErrUnauthorized

// IncompatibleError is the registry refusing a schema for a subject.
type IncompatibleError = registry.IncompatibleError

// register registers text under subject (or finds it already there) and
// returns its id.
func (r *Registry) register(subject, text string) (*writerSchema, error) {
	s, err := r.client.Register(subject, registry.Avro, text)
	if err != nil {
		return nil, fmt.Errorf("avro: %w", err)
	}
	return r.remember(s.ID, text)
}

// latest returns the latest schema registered under subject.
func (r *Registry) latest(subject string) (*writerSchema, error) {
	s, err := r.client.Latest(subject)
	if err != nil {
		return nil, fmt.Errorf("avro: %w", err)
	}
	return r.remember(s.ID, s.Text)
}
