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

	"github.com/eddy-go/eddy/serde"
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
		return nil, fmt.Errorf("avro: looking up schema id %d in the registry: %w", id, refused(err))
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

// ErrUnauthorized is wrapped by the errors of registry requests refused
// for their credentials (HTTP 401: RegistryConfig.Username and Password)
// or their permissions (HTTP 403). It wraps serde.ErrSetup: a running app
// stops with it rather than treat the records as bad.
var ErrUnauthorized error = refusal{}

type refusal struct{}

func (refusal) Error() string { return "avro: the schema registry refused the request" }
func (refusal) Unwrap() error { return serde.ErrSetup }

// refused wraps an error of a request the registry refused with HTTP 401
// or 403 in ErrUnauthorized, saying which; other errors are returned as
// they are.
func refused(err error) error {
	code := 0
	var re srclient.Error
	switch {
	case errors.As(err, &re):
		code = re.Code
		for code >= 1000 { // Confluent's 40101, 40301
			code /= 100
		}
	case strings.HasPrefix(err.Error(), "401 "):
		code = 401
	case strings.HasPrefix(err.Error(), "403 "):
		code = 403
	}
	switch code {
	case 401:
		return fmt.Errorf("%w: HTTP 401, the credentials were not accepted (check RegistryConfig.Username and Password): %v", ErrUnauthorized, err)
	case 403:
		return fmt.Errorf("%w: HTTP 403, the user may not do this: %v", ErrUnauthorized, err)
	}
	return err
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
		return nil, fmt.Errorf("avro: registering the schema for subject %q: %w", subject, refused(err))
	}
	return r.remember(s.ID(), text)
}

// latest returns the latest schema registered under subject.
func (r *Registry) latest(subject string) (*writerSchema, error) {
	s, err := r.client.GetLatestSchema(subject)
	if err != nil {
		return nil, fmt.Errorf("avro: reading the latest schema of subject %q: %w", subject, refused(err))
	}
	return r.remember(s.ID(), s.Schema())
}
