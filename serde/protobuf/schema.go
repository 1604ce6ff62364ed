package protobuf

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/bufbuild/protocompile"
	"github.com/jhump/protoreflect/desc"
	"github.com/jhump/protoreflect/desc/protoprint"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/eddy-go/eddy/serde/registry"
)

// The schemas of a Serde as the registry holds them: .proto source text,
// one subject per imported file (a schema reference named by its import
// path, the registry's default reference subject), except the well-known
// types (google/protobuf/*.proto), which registries know without one.

// isKnownType reports whether path is one of Protobuf's well-known type
// files, built into Confluent-compatible registries.
func isKnownType(path string) bool { return strings.HasPrefix(path, "google/protobuf/") }

// printFile returns fd as .proto source.
func printFile(fd protoreflect.FileDescriptor) (string, error) {
	w, err := desc.WrapFile(fd)
	if err != nil {
		return "", fmt.Errorf("protobuf: %s: %w", fd.Path(), err)
	}
	p := protoprint.Printer{Compact: true, OmitComments: protoprint.CommentsAll}
	text, err := p.PrintProtoToString(w)
	if err != nil {
		return "", fmt.Errorf("protobuf: printing %s: %w", fd.Path(), err)
	}
	return text, nil
}

// files registers .proto files with a registry, each once.
type files struct {
	reg *registry.Client

	mu sync.Mutex
	// guarded by mu
	done map[string]registry.Reference // by file path
}

// references registers the files fd imports (not the well-known types)
// under their import paths, depth first, and returns fd's references.
func (f *files) references(fd protoreflect.FileDescriptor) ([]registry.Reference, error) {
	var refs []registry.Reference
	imports := fd.Imports()
	for i := 0; i < imports.Len(); i++ {
		dep := imports.Get(i).FileDescriptor
		if isKnownType(dep.Path()) {
			continue
		}
		ref, err := f.register(dep)
		if err != nil {
			return nil, err
		}
		refs = append(refs, ref)
	}
	return refs, nil
}

// register registers an imported file under its path as subject.
func (f *files) register(fd protoreflect.FileDescriptor) (registry.Reference, error) {
	f.mu.Lock()
	ref, ok := f.done[fd.Path()]
	f.mu.Unlock()
	if ok {
		return ref, nil
	}
	refs, err := f.references(fd)
	if err != nil {
		return registry.Reference{}, err
	}
	text, err := printFile(fd)
	if err != nil {
		return registry.Reference{}, err
	}
	s, err := f.reg.Register(fd.Path(), registry.Protobuf, text, refs...)
	if err != nil {
		return registry.Reference{}, fmt.Errorf("protobuf: registering %s, imported by the serde's schema: %w", fd.Path(), err)
	}
	if s.Version == 0 {
		return registry.Reference{}, fmt.Errorf("protobuf: the registry did not say which version of subject %q holds %s", fd.Path(), fd.Path())
	}
	ref = registry.Reference{Name: fd.Path(), Subject: s.Subject, Version: s.Version}
	f.mu.Lock()
	f.done[fd.Path()] = ref
	f.mu.Unlock()
	return ref, nil
}

// compile turns a registered schema and the schemas it references into a
// file descriptor. A schema is .proto source (what Java's serializer and
// eddy register) or a base64 FileDescriptorProto (what Python's does).
func compile(reg *registry.Client, s *registry.Schema) (protoreflect.FileDescriptor, error) {
	const main = "registered-schema.proto"
	sources := map[string]string{main: s.Text}
	var fetch func(refs []registry.Reference) error
	fetch = func(refs []registry.Reference) error {
		for _, r := range refs {
			if _, ok := sources[r.Name]; ok {
				continue
			}
			dep, err := reg.Version(r.Subject, r.Version)
			if err != nil {
				return err
			}
			sources[r.Name] = dep.Text
			if err := fetch(dep.References); err != nil {
				return err
			}
		}
		return nil
	}
	if err := fetch(s.References); err != nil {
		return nil, err
	}
	resolver := protocompile.WithStandardImports(protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
		src, ok := sources[path]
		if !ok {
			return protocompile.SearchResult{}, fs.ErrNotExist
		}
		if fdp := asDescriptor(src); fdp != nil {
			fdp.Name = proto.String(path)
			return protocompile.SearchResult{Proto: fdp}, nil
		}
		return protocompile.SearchResult{Source: strings.NewReader(src)}, nil
	}))
	c := protocompile.Compiler{Resolver: resolver}
	out, err := c.Compile(context.Background(), main)
	if err != nil {
		return nil, fmt.Errorf("protobuf: compiling schema id %d: %w", s.ID, err)
	}
	return out[0], nil
}

// asDescriptor returns src as a FileDescriptorProto when it is one in
// base64, nil otherwise.
func asDescriptor(src string) *descriptorpb.FileDescriptorProto {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(src))
	if err != nil {
		return nil
	}
	fdp := &descriptorpb.FileDescriptorProto{}
	if proto.Unmarshal(b, fdp) != nil {
		return nil
	}
	return fdp
}

// messageIndexes returns the path to md within its file: the index of its
// top-level message, then of each nested one.
func messageIndexes(md protoreflect.MessageDescriptor) []int {
	var path []int
	for d := protoreflect.Descriptor(md); ; {
		path = append([]int{d.Index()}, path...)
		parent, ok := d.Parent().(protoreflect.MessageDescriptor)
		if !ok {
			return path
		}
		d = parent
	}
}

// messageAt returns the message at indexes in fd.
func messageAt(fd protoreflect.FileDescriptor, indexes []int) (protoreflect.MessageDescriptor, error) {
	msgs := fd.Messages()
	var md protoreflect.MessageDescriptor
	for depth, i := range indexes {
		if i < 0 || i >= msgs.Len() {
			return nil, fmt.Errorf("protobuf: message index %v: no message %d at depth %d (%d there)", indexes, i, depth, msgs.Len())
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	if md == nil {
		return nil, errors.New("protobuf: empty message index")
	}
	return md, nil
}

// findMessage returns the message of the given full name in fd.
func findMessage(fd protoreflect.FileDescriptor, name protoreflect.FullName) protoreflect.MessageDescriptor {
	var find func(msgs protoreflect.MessageDescriptors) protoreflect.MessageDescriptor
	find = func(msgs protoreflect.MessageDescriptors) protoreflect.MessageDescriptor {
		for i := 0; i < msgs.Len(); i++ {
			m := msgs.Get(i)
			if m.FullName() == name {
				return m
			}
			if n := find(m.Messages()); n != nil {
				return n
			}
		}
		return nil
	}
	return find(fd.Messages())
}
