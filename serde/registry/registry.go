// Package registry is the Confluent-compatible schema registry client that
// eddy's registry serdes (serde/avro, serde/protobuf, serde/jsonschema)
// share, and the Confluent wire format's framing: a 0 magic byte, then the
// writer schema's 4-byte big-endian id, then the payload.
//
// One Client is meant to serve every serde of an app: a schema is fetched
// by id once and then served from memory, so a registry outage does not
// stop processing of schemas already seen. NewInMemory is a registry in
// the process, for tests and examples.
//
//	reg, err := registry.New(registry.Config{URL: "http://localhost:8081"})
//	orders, err := protobuf.New[*orderpb.Order](reg)
//	events, err := jsonschema.New[Event](reg, jsonschema.Derived())
package registry

import (
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/riferrei/srclient"

	"github.com/eddy-go/eddy/serde"
)

// Config says how to reach a Confluent-compatible schema registry.
type Config struct {
	// URL of the registry, e.g. "http://localhost:8081". Required.
	URL string
	// Username and Password, when set, are sent as HTTP basic auth.
	Username, Password string
	// TLS configures HTTPS (client certificates, CAs). Default: Go's.
	TLS *tls.Config
	// Timeout of each registry request. Default 10s.
	Timeout time.Duration
	// Client replaces the HTTP client entirely.
	Client *http.Client
}

// Type is a schema's format as the registry names it.
type Type string

// The registry's three schema types.
const (
	Avro     Type = "AVRO"
	Protobuf Type = "PROTOBUF"
	JSON     Type = "JSON"
)

// Reference is a schema's use of another registered schema: a Protobuf
// import or a JSON Schema $ref, by its name there, served by a subject's
// version.
type Reference struct {
	Name    string
	Subject string
	Version int
}

// Schema is a registered schema.
type Schema struct {
	// ID is the registry's id of the schema, the one in the wire format.
	ID int
	// Type is the schema's format.
	Type Type
	// Text is the schema as registered (Avro or JSON Schema JSON, Protobuf
	// .proto source).
	Text string
	// References are the schemas it imports.
	References []Reference
	// Subject and Version say where it was found, when it was looked up by
	// subject (zero when looked up by id alone).
	Subject string
	Version int
}

// Client is a schema registry client with the caches serdes need. It is
// safe for concurrent use.
type Client struct {
	b backend

	mu sync.RWMutex
	// guarded by mu
	byID      map[int]*Schema
	byVersion map[subjectVersion]*Schema
}

// backend is what a Client asks of a registry: a Confluent-compatible one
// over HTTP (srclient), or the in-process one of NewInMemory.
type backend interface {
	// byID returns the schema with id.
	byID(id int) (*Schema, error)
	// version returns a subject's version; 0 means its latest.
	version(subject string, version int) (*Schema, error)
	// register registers a schema under subject, or finds it there, and
	// returns it with its id, version and the subject's name as the
	// registry stores it; a refusal is an *IncompatibleError.
	register(subject string, t Type, text string, refs []Reference) (*Schema, error)
}

type subjectVersion struct {
	subject string
	version int
}

// New returns a client of the registry cfg names.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("schema registry: Config.URL is required")
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
	return newClient(&remote{c: c, url: strings.TrimRight(cfg.URL, "/"), hc: hc, cfg: cfg}), nil
}

// NewWithClient wraps an srclient client (srclient's mock in tests).
func NewWithClient(c srclient.ISchemaRegistryClient) *Client {
	return newClient(&remote{c: c})
}

func newClient(b backend) *Client {
	return &Client{b: b, byID: map[int]*Schema{}, byVersion: map[subjectVersion]*Schema{}}
}

// remote is a Confluent-compatible registry over HTTP, through srclient.
type remote struct {
	c srclient.ISchemaRegistryClient
	// url, hc and cfg make the one request srclient lacks (a subject's
	// name as the registry stores it); nil hc when wrapping a given client.
	url string
	hc  *http.Client
	cfg Config
}

func (r *remote) byID(id int) (*Schema, error) {
	got, err := r.c.GetSchema(id)
	if err != nil {
		return nil, err
	}
	s := fromSR(got, "")
	s.ID = id
	return s, nil
}

func (r *remote) version(subject string, version int) (*Schema, error) {
	var got *srclient.Schema
	var err error
	if version == 0 {
		got, err = r.c.GetLatestSchema(subject)
	} else {
		got, err = r.c.GetSchemaByVersion(subject, version)
	}
	if err != nil {
		return nil, err
	}
	s := fromSR(got, subject)
	if version != 0 {
		s.Version = version
	}
	return s, nil
}

func (r *remote) register(subject string, t Type, text string, refs []Reference) (*Schema, error) {
	got, err := r.c.CreateSchema(subject, text, srclient.SchemaType(t), toSR(refs)...)
	if err != nil {
		var re srclient.Error
		if errors.As(err, &re) && (re.Code == 409 || re.Code == 42201 || re.Code == 422) {
			ie := &IncompatibleError{Subject: subject, Reason: re.Message, Code: re.Code}
			if lvl, lerr := r.c.GetCompatibilityLevel(subject, true); lerr == nil && lvl != nil {
				ie.Level = string(*lvl)
			}
			return nil, ie
		}
		return nil, err
	}
	s := fromSR(got, subject)
	s.Type, s.Text, s.References = t, text, refs
	if s.Version == 0 {
		// The registry answers a registration with the id alone; the
		// version is what a reference to this schema names.
		if l, err := r.c.LookupSchema(subject, text, srclient.SchemaType(t), toSR(refs)...); err == nil {
			s.Version = l.Version()
		}
	}
	if s.Version != 0 {
		if name, err := r.storedName(subject, s.Version); err == nil && name != "" {
			s.Subject = name
		}
	}
	return s, nil
}

func fromSR(s *srclient.Schema, subject string) *Schema {
	t := Avro
	if st := s.SchemaType(); st != nil && *st != "" {
		t = Type(*st)
	}
	out := &Schema{ID: s.ID(), Type: t, Text: s.Schema(), Subject: subject, Version: s.Version()}
	for _, r := range s.References() {
		out.References = append(out.References, Reference{Name: r.Name, Subject: r.Subject, Version: r.Version})
	}
	return out
}

func toSR(refs []Reference) []srclient.Reference {
	var out []srclient.Reference
	for _, r := range refs {
		out = append(out, srclient.Reference{Name: r.Name, Subject: r.Subject, Version: r.Version})
	}
	return out
}

// ByID returns the schema with id, from memory after the first lookup.
func (c *Client) ByID(id int) (*Schema, error) {
	c.mu.RLock()
	s, ok := c.byID[id]
	c.mu.RUnlock()
	if ok {
		return s, nil
	}
	s, err := c.b.byID(id)
	if err != nil {
		return nil, fmt.Errorf("schema registry: looking up schema id %d: %w", id, refused(err))
	}
	c.mu.Lock()
	c.byID[id] = s
	c.mu.Unlock()
	return s, nil
}

// Version returns a subject's version (a reference's target), from memory
// after the first lookup.
func (c *Client) Version(subject string, version int) (*Schema, error) {
	k := subjectVersion{subject, version}
	c.mu.RLock()
	s, ok := c.byVersion[k]
	c.mu.RUnlock()
	if ok {
		return s, nil
	}
	s, err := c.b.version(subject, version)
	if err != nil {
		return nil, fmt.Errorf("schema registry: reading version %d of subject %q: %w", version, subject, refused(err))
	}
	c.mu.Lock()
	c.byVersion[k] = s
	c.mu.Unlock()
	return s, nil
}

// Latest returns the latest schema registered under subject (not cached:
// it is read when a serde starts writing a subject).
func (c *Client) Latest(subject string) (*Schema, error) {
	s, err := c.b.version(subject, 0)
	if err != nil {
		return nil, fmt.Errorf("schema registry: reading the latest schema of subject %q: %w", subject, refused(err))
	}
	return s, nil
}

// Register registers a schema under subject (or finds it already there)
// and returns it with its id and version. A schema the registry refuses
// (incompatible with the subject's earlier versions, or invalid) is an
// *IncompatibleError.
func (c *Client) Register(subject string, t Type, text string, refs ...Reference) (*Schema, error) {
	s, err := c.b.register(subject, t, text, refs)
	if err != nil {
		var ie *IncompatibleError
		if errors.As(err, &ie) {
			return nil, err
		}
		return nil, fmt.Errorf("schema registry: registering a schema for subject %q: %w", subject, refused(err))
	}
	return s, nil
}

// storedName returns the name the registry stores subject under, which a
// reference to it must name. Confluent's registry decodes a subject's
// URL escapes ("a%2Fb.proto" is "a/b.proto"); some compatible registries
// keep them, so a subject holding "/" (an import path) is stored escaped.
func (r *remote) storedName(subject string, version int) (string, error) {
	if r.hc == nil || !strings.ContainsAny(subject, "/%?#") {
		return subject, nil
	}
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/subjects/%s/versions/%d", r.url, url.PathEscape(subject), version), nil)
	if err != nil {
		return "", err
	}
	if r.cfg.Username != "" || r.cfg.Password != "" {
		req.SetBasicAuth(r.cfg.Username, r.cfg.Password)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	var v struct {
		Subject string `json:"subject"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", err
	}
	return v.Subject, nil
}

// ErrUnauthorized is wrapped by the errors of registry requests refused
// for their credentials (HTTP 401: Config.Username and Password) or their
// permissions (HTTP 403). It wraps serde.ErrSetup: a running app stops with
// it rather than treat the records as bad.
var ErrUnauthorized error = refusal{}

type refusal struct{}

func (refusal) Error() string { return "the schema registry refused the request" }
func (refusal) Unwrap() error { return serde.ErrSetup }

// RequestError is a request the registry answered with an error: the HTTP
// status, the registry's error code (Confluent's: 40403 is "schema not
// found", 42201 "invalid schema") and its message, as one line.
type RequestError struct {
	Status  int
	Code    int
	Message string
}

func (e *RequestError) Error() string {
	msg := strings.Join(strings.Fields(e.Message), " ")
	if msg == "" {
		msg = "no message"
	}
	if e.Code != 0 && e.Code != e.Status {
		return fmt.Sprintf("HTTP %d: %s (error code %d)", e.Status, msg, e.Code)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, msg)
}

// refused returns the error of a request the registry refused as one clean
// line (a *RequestError in place of the raw response body), wrapped in
// ErrUnauthorized, saying which, for HTTP 401 or 403; other errors are
// returned as they are.
func refused(err error) error {
	status := 0
	var re srclient.Error
	switch {
	case errors.As(err, &re):
		status = re.Code
		for status >= 1000 { // Confluent's 40101, 40301, 40403
			status /= 100
		}
		err = &RequestError{Status: status, Code: re.Code, Message: re.Message}
	case strings.HasPrefix(err.Error(), "401 "):
		status = 401
	case strings.HasPrefix(err.Error(), "403 "):
		status = 403
	}
	switch status {
	case 401:
		return fmt.Errorf("%w: HTTP 401, the credentials were not accepted (check the registry's Username and Password): %w", ErrUnauthorized, err)
	case 403:
		return fmt.Errorf("%w: HTTP 403, the user may not do this: %w", ErrUnauthorized, err)
	}
	return err
}

// IncompatibleError is the registry refusing a schema for a subject:
// incompatible with its earlier versions under the subject's compatibility
// level, or not a valid schema.
type IncompatibleError struct {
	Subject string
	// Level is the subject's compatibility level (BACKWARD, FULL, …), ""
	// when the registry would not say.
	Level string
	// Reason is the registry's own message.
	Reason string
	// Code is the registry's error code (409 incompatible, 42201 invalid).
	Code int
}

func (e *IncompatibleError) Error() string {
	level := e.Level
	if level == "" {
		level = "unknown"
	}
	return fmt.Sprintf("the schema registry refused the schema for subject %q (compatibility level %s): %s", e.Subject, level, e.Reason)
}

// ErrWireFormat reports bytes that are not in the Confluent wire format.
var ErrWireFormat = errors.New("serde: not in the Confluent wire format")

// AppendHeader appends the wire format's header (magic byte and schema
// id) to buf.
func AppendHeader(buf []byte, id int) []byte {
	return binary.BigEndian.AppendUint32(append(buf, 0), uint32(id))
}

// ParseHeader splits bytes in the wire format into the writer schema's id
// and the payload.
func ParseHeader(data []byte) (id int, payload []byte, err error) {
	if len(data) < 5 {
		return 0, nil, fmt.Errorf("%w: %d bytes, need at least 5", ErrWireFormat, len(data))
	}
	if data[0] != 0 {
		return 0, nil, fmt.Errorf("%w: magic byte %d, want 0", ErrWireFormat, data[0])
	}
	return int(binary.BigEndian.Uint32(data[1:5])), data[5:], nil
}

// SubjectStrategy names the registry subject a topic's schema lives under.
type SubjectStrategy int

const (
	// TopicName: "<topic>-value" (or "<topic>-key"). The default.
	TopicName SubjectStrategy = iota
	// RecordName: the record's full name, whatever the topic.
	RecordName
	// TopicRecordName: "<topic>-<record full name>".
	TopicRecordName
)

// Subject returns the subject of topic's keys (key) or values under the
// strategy, for a record of the given full name.
func (s SubjectStrategy) Subject(topic string, key bool, record string) string {
	switch s {
	case RecordName:
		return record
	case TopicRecordName:
		return topic + "-" + record
	}
	if key {
		return topic + "-key"
	}
	return topic + "-value"
}

// WriteMode says which schema a serde writes with.
type WriteMode int

const (
	// Register registers the serde's own schema (the default; Confluent's
	// auto.register.schemas).
	Register WriteMode = iota
	// Latest writes with the latest schema registered under the subject
	// (use.latest.version, without registering).
	Latest
	// PinnedID writes with a given schema id (use.schema.id).
	PinnedID
)

// Options are the settings every registry serde takes, set by each
// format's Option functions (ForKeys, WithSubjectStrategy,
// UseLatestSchema, UseSchemaID, RegisterFor).
type Options struct {
	// Key: the serde is for record keys ("<topic>-key" subjects).
	Key bool
	// Strategy names subjects.
	Strategy SubjectStrategy
	// Mode and ID say which schema is written with.
	Mode WriteMode
	ID   int
	// Topics are registered (or looked up) when the serde is created.
	Topics []string
}

// Subject returns topic's subject for a record of the given full name.
func (o *Options) Subject(topic, record string) string {
	return o.Strategy.Subject(topic, o.Key, record)
}

// Final reports whether the outcome of setting up a writer (err, nil for
// success) holds for good and may be remembered: success, and a refusal
// by the registry, are final; other failures (the registry unreachable)
// are worth trying again on the next record.
func Final(err error) bool {
	var ie *IncompatibleError
	return err == nil || errors.As(err, &ie)
}
