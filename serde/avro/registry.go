package avro

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/riferrei/srclient"
)

// RegistryConfig says how to reach a Confluent-compatible schema registry.
type RegistryConfig struct {
	// URL of the registry, e.g. "http://localhost:8081". Required.
	URL string
	// Username and Password, when set, are sent as HTTP basic auth.
	Username, Password string
	// TLS configures HTTPS (client certificates, CAs). Default: Go's.
	TLS *tls.Config
	// Timeout of each registry request. Default 10s.
	Timeout time.Duration
	// Client replaces the HTTP client entirely (tests use srclient's mock
	// through NewRegistryWithClient instead).
	Client *http.Client
}

// Registry is a schema registry client with the caches a serde needs: a
// schema id is looked up once, then served from memory, so a registry
// outage does not stop processing of schemas already seen. A Registry is
// safe for concurrent use and meant to be shared by all serdes of an app.
type Registry struct {
	client srclient.ISchemaRegistryClient

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
	if cfg.URL == "" {
		return nil, errors.New("avro: RegistryConfig.URL is required")
	}
	hc := cfg.Client
	if hc == nil {
		timeout := cfg.Timeout
		if timeout == 0 {
			timeout = 10 * time.Second
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if cfg.TLS != nil {
			tr.TLSClientConfig = cfg.TLS
		}
		hc = &http.Client{Timeout: timeout, Transport: tr}
	}
	c := srclient.NewSchemaRegistryClient(strings.TrimRight(cfg.URL, "/"), srclient.WithClient(hc))
	if cfg.Username != "" || cfg.Password != "" {
		c.SetCredentials(cfg.Username, cfg.Password)
	}
	return NewRegistryWithClient(c), nil
}

// NewRegistryWithClient wraps an srclient client (srclient's mock in
// tests).
func NewRegistryWithClient(c srclient.ISchemaRegistryClient) *Registry {
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
	s, err := r.client.GetSchema(id)
	if err != nil {
		return nil, fmt.Errorf("avro: looking up schema id %d in the registry: %w", id, err)
	}
	return r.remember(id, s.Schema())
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

// IncompatibleError is the registry refusing a schema for a subject.
type IncompatibleError struct {
	Subject string
	// Level is the subject's compatibility level (BACKWARD, FULL, …), ""
	// when the registry would not say.
	Level string
	// Reason is the registry's own message.
	Reason string
	Code   int
}

func (e *IncompatibleError) Error() string {
	level := e.Level
	if level == "" {
		level = "unknown"
	}
	return fmt.Sprintf("avro: the schema registry refused the schema for subject %q (compatibility level %s): %s", e.Subject, level, e.Reason)
}

// register registers text under subject (or finds it already there) and
// returns its id.
func (r *Registry) register(subject, text string) (*writerSchema, error) {
	s, err := r.client.CreateSchema(subject, text, srclient.Avro)
	if err != nil {
		var re srclient.Error
		if errors.As(err, &re) && (re.Code == 409 || re.Code == 42201 || re.Code == 422) {
			ie := &IncompatibleError{Subject: subject, Reason: re.Message, Code: re.Code}
			if lvl, lerr := r.client.GetCompatibilityLevel(subject, true); lerr == nil && lvl != nil {
				ie.Level = string(*lvl)
			}
			return nil, ie
		}
		return nil, fmt.Errorf("avro: registering the schema for subject %q: %w", subject, err)
	}
	return r.remember(s.ID(), text)
}

// latest returns the latest schema registered under subject.
func (r *Registry) latest(subject string) (*writerSchema, error) {
	s, err := r.client.GetLatestSchema(subject)
	if err != nil {
		return nil, fmt.Errorf("avro: reading the latest schema of subject %q: %w", subject, err)
	}
	return r.remember(s.ID(), s.Schema())
}
