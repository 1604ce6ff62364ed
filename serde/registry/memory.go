package registry

import (
	"fmt"
	"slices"
	"sync"
)

// NewInMemory returns a client of a registry that lives in the process:
// for tests of topologies that use registry serdes (with streamstest, for
// one) and for examples, as Confluent's serdes take a "mock://" URL. It
// keeps subjects, versions, ids and references as a registry does, gives
// the same id to the same schema under any subject, and resolves
// references; it does not check compatibility (every new schema is a new
// version) or parse schemas beyond what the serdes do. Each call returns a
// new, empty registry: share one Client between the serdes that must agree.
func NewInMemory() *Client {
	return newClient(&memory{bySubject: map[string][]*Schema{}})
}

type memory struct {
	mu sync.Mutex
	// guarded by mu
	schemas   []*Schema // by id-1
	bySubject map[string][]*Schema
}

// notFound is the registry's answer for an unknown id or subject.
type notFound struct{ what string }

func (e notFound) Error() string { return "404 not found: " + e.what }

func (m *memory) byID(id int) (*Schema, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id < 1 || id > len(m.schemas) {
		return nil, notFound{fmt.Sprintf("schema id %d", id)}
	}
	s := *m.schemas[id-1]
	s.Subject, s.Version = "", 0
	return &s, nil
}

func (m *memory) version(subject string, version int) (*Schema, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	versions := m.bySubject[subject]
	if version == 0 {
		version = len(versions)
	}
	if version < 1 || version > len(versions) {
		return nil, notFound{fmt.Sprintf("version %d of subject %q", version, subject)}
	}
	s := *versions[version-1]
	return &s, nil
}

func (m *memory) register(subject string, t Type, text string, refs []Reference) (*Schema, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range refs {
		if r.Version < 1 || r.Version > len(m.bySubject[r.Subject]) {
			return nil, &IncompatibleError{Subject: subject, Code: 42201,
				Reason: fmt.Sprintf("reference %q: no version %d of subject %q", r.Name, r.Version, r.Subject)}
		}
	}
	same := func(s *Schema) bool {
		return s.Type == t && s.Text == text && slices.Equal(s.References, refs)
	}
	for _, s := range m.bySubject[subject] {
		if same(s) {
			out := *s
			return &out, nil
		}
	}
	id := 0
	for _, s := range m.schemas {
		if same(s) {
			id = s.ID
			break
		}
	}
	if id == 0 {
		id = len(m.schemas) + 1
		m.schemas = append(m.schemas, &Schema{ID: id, Type: t, Text: text, References: slices.Clone(refs)})
	}
	s := &Schema{ID: id, Type: t, Text: text, References: slices.Clone(refs), Subject: subject, Version: len(m.bySubject[subject]) + 1}
	m.bySubject[subject] = append(m.bySubject[subject], s)
	out := *s
	return &out, nil
}
