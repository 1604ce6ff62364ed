// Command protogen generates Go code for .proto files as protoc with
// protoc-gen-go would, without protoc: protocompile parses the files and
// protoc-gen-go's own generator writes the code. It regenerates the
// messages eddy's Protobuf tests and examples use (make proto).
//
//	go run ./protogen -I DIR -out DIR [-module PATH] [-M file=importpath ...] file.proto ...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/cmd/protoc-gen-go/internal_gengo"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

type mapping []string

func (m *mapping) String() string     { return strings.Join(*m, ",") }
func (m *mapping) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var (
		include = flag.String("I", ".", "import path of the .proto files")
		out     = flag.String("out", ".", "output directory")
		module  = flag.String("module", "", "write files by Go import path less this module path (protoc-gen-go's module=); default: next to their .proto (paths=source_relative)")
		maps    mapping
	)
	flag.Var(&maps, "M", "file=go import path, as protoc-gen-go's M option")
	flag.Parse()
	if err := run(*include, *out, *module, maps, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "protogen:", err)
		os.Exit(1)
	}
}

func run(include, out, module string, maps []string, files []string) error {
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{include}})}
	compiled, err := c.Compile(context.Background(), files...)
	if err != nil {
		return err
	}
	// The request holds every file the generated ones import, in
	// dependency order.
	var protos []*descriptorpb.FileDescriptorProto
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := 0; i < fd.Imports().Len(); i++ {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		protos = append(protos, protodesc.ToFileDescriptorProto(fd))
	}
	for _, f := range compiled {
		add(f)
	}
	param := "paths=source_relative"
	if module != "" {
		param = "module=" + module
	}
	for _, m := range maps {
		param += ",M" + m
	}
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: files, Parameter: proto.String(param), ProtoFile: protos}
	plugin, err := protogen.Options{}.New(req)
	if err != nil {
		return err
	}
	for _, f := range plugin.Files {
		if f.Generate {
			internal_gengo.GenerateFile(plugin, f)
		}
	}
	resp := plugin.Response()
	if resp.Error != nil {
		return fmt.Errorf("%s", resp.GetError())
	}
	for _, f := range resp.File {
		path := filepath.Join(out, f.GetName())
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(f.GetContent()), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}
