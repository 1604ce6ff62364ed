package jsonschema

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"

	js "github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/eddy-go/eddy/serde/registry"
)

// Schema references. A JSON schema may refer ("$ref") to other schemas by
// URL ("https://example.com/address.json", usually the other schema's
// "$id") or by a name relative to its own ("address.json"). In the
// registry a reference is the name the "$ref" uses, bound to a subject
// and version that hold the schema (as Confluent's serializers register
// them: the subject is the name). Reading, a writer schema's references
// are looked up, recursively, and each is made available at its name;
// nothing is ever fetched from a URL.

// WithReferences names registered schemas the serde's schema refers to,
// each by the name its "$ref" uses: they are looked up (with their own
// references, recursively) when the serde is created, and registered with
// the serde's schema as its references.
func WithReferences(refs ...registry.Reference) Option {
	return func(o *options) { o.refs = append(o.refs, refs...) }
}

// WithReferencedSchema gives the text of a schema the serde's schema (or
// a schema given earlier this way) refers to by name. Writing, the serde
// registers it first under subject ("" for the name itself, Confluent's
// default for references), with references to the schemas given before
// it that its "$ref"s name, then its own schema with references to those
// it names. Give a chain's schemas in order: the one referred to first.
func WithReferencedSchema(name, subject, schema string) Option {
	if subject == "" {
		subject = name
	}
	return func(o *options) {
		o.named = append(o.named, namedSchema{name: name, subject: subject, text: schema})
	}
}

type namedSchema struct{ name, subject, text string }

// memBase is the base URL of a schema without an "$id": the schemas it
// refers to by a relative name are made available next to it.
const memBase = "mem://eddy/"

// resolveRef returns name resolved against base, without a fragment.
func resolveRef(base, name string) string {
	u, err := url.Parse(name)
	if err != nil {
		return name
	}
	u.Fragment = ""
	if u.IsAbs() {
		return u.String()
	}
	b, err := url.Parse(base)
	if err != nil {
		return u.String()
	}
	return b.ResolveReference(u).String()
}

// topID returns a schema's top-level "$id" ("" for none or no JSON).
func topID(text string) string {
	var meta struct {
		ID string `json:"$id"`
	}
	if json.Unmarshal([]byte(text), &meta) != nil {
		return ""
	}
	return meta.ID
}

// baseOf is where a schema available at at resolves its relative
// references: its own "$id" (resolved against at), or at.
func baseOf(text, at string) string {
	if id := topID(text); id != "" {
		return resolveRef(at, id)
	}
	return at
}

// refsIn lists every "$ref" of a schema, resolved against base, without
// fragments ("#/definitions/x", a reference inside the schema, resolves to
// base itself).
func refsIn(text, base string) map[string]bool {
	var doc any
	if json.Unmarshal([]byte(text), &doc) != nil {
		return nil
	}
	out := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && k == "$ref" {
					out[resolveRef(base, s)] = true
					continue
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	return out
}

// referenced reports whether a schema available at at, with text, refers
// to the schema named name (as its "$ref" resolves it).
func referenced(text, at, name string) bool {
	return refsIn(text, baseOf(text, at))[resolveRef(baseOf(text, at), name)]
}

// schemaSet compiles schemas with their references.
type schemaSet struct {
	c *js.Compiler
	// lookup returns a registered reference's schema.
	lookup func(registry.Reference) (*registry.Schema, error)
	added  map[string]bool // resource URLs
}

func newSchemaSet(lookup func(registry.Reference) (*registry.Schema, error)) *schemaSet {
	c := js.NewCompiler()
	c.Draft = js.Draft7 // for schemas without $schema, as Confluent's
	c.LoadURL = func(s string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("%s is not among the schema's references (registered with it, or given by WithReferences or WithReferencedSchema)", s)
	}
	return &schemaSet{c: c, lookup: lookup, added: map[string]bool{}}
}

// add makes text available at at, and under its own "$id" when that
// differs (a "$ref" by the id of a schema referenced by a relative name).
func (s *schemaSet) add(at, text string) error {
	urls := []string{at}
	if id := topID(text); id != "" {
		if abs := resolveRef(at, id); abs != at {
			urls = append(urls, abs)
		}
	}
	for _, u := range urls {
		if s.added[u] {
			continue
		}
		if err := s.c.AddResource(u, strings.NewReader(text)); err != nil {
			return err
		}
		s.added[u] = true
	}
	return nil
}

// addRegistered adds the registered references of a schema whose base is
// base, and theirs, recursively.
func (s *schemaSet) addRegistered(base, of string, refs []registry.Reference) error {
	for _, r := range refs {
		at := resolveRef(base, r.Name)
		if s.added[at] {
			continue
		}
		dep, err := s.lookup(r)
		if err != nil {
			return fmt.Errorf("schema %s refers to %q (subject %q, version %d): %w", of, r.Name, r.Subject, r.Version, err)
		}
		if dep.Type != registry.JSON {
			return fmt.Errorf("schema %s refers to %q (subject %q, version %d), a %s schema, not JSON", of, r.Name, r.Subject, r.Version, dep.Type)
		}
		if err := s.add(at, dep.Text); err != nil {
			return fmt.Errorf("schema %s's reference %q: %w", of, r.Name, err)
		}
		if err := s.addRegistered(baseOf(dep.Text, at), fmt.Sprintf("%q", r.Name), dep.References); err != nil {
			return err
		}
	}
	return nil
}

// compile compiles text, named name in errors, with its registered
// references refs and the referenced schemas local gives by text.
func (s *schemaSet) compile(name, text string, refs []registry.Reference, local []namedSchema) (*js.Schema, error) {
	at := memBase + url.PathEscape(name) + ".json"
	base := baseOf(text, at)
	if err := s.addRegistered(base, name, refs); err != nil {
		return nil, fmt.Errorf("jsonschema: %w", err)
	}
	for _, n := range local {
		if err := s.add(resolveRef(base, n.name), n.text); err != nil {
			return nil, fmt.Errorf("jsonschema: the referenced schema %q: %w", n.name, err)
		}
	}
	if err := s.add(at, text); err != nil {
		return nil, fmt.Errorf("jsonschema: schema %s: %w", name, err)
	}
	compiled, err := s.c.Compile(at)
	if err != nil {
		return nil, fmt.Errorf("jsonschema: schema %s: %w", name, err)
	}
	return compiled, nil
}

// registerReferenced registers the schemas WithReferencedSchema gave, in
// order, and returns the references of the serde's own schema: those
// WithReferences gave and the given schemas its "$ref"s name.
func registerReferenced(reg *registry.Client, text string, refs []registry.Reference, named []namedSchema) ([]registry.Reference, error) {
	var done []registry.Reference // the named schemas, registered
	for _, n := range named {
		var deps []registry.Reference
		for _, r := range append(append([]registry.Reference{}, refs...), done...) {
			if referenced(n.text, memBase+"x.json", r.Name) {
				deps = append(deps, r)
			}
		}
		s, err := reg.Register(n.subject, registry.JSON, n.text, deps...)
		if err != nil {
			return nil, fmt.Errorf("jsonschema: registering the referenced schema %q: %w", n.name, err)
		}
		if s.Version == 0 {
			return nil, fmt.Errorf("jsonschema: the registry did not say which version of subject %q holds the referenced schema %q", n.subject, n.name)
		}
		done = append(done, registry.Reference{Name: n.name, Subject: s.Subject, Version: s.Version})
	}
	out := append([]registry.Reference{}, refs...)
	for _, r := range done {
		if referenced(text, memBase+"x.json", r.Name) {
			out = append(out, r)
		}
	}
	return out, nil
}
