package streams_test

import (
	"bufio"
	"bytes"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// publicPackages are the packages a user imports.
var publicPackages = []string{
	"github.com/eddy-go/eddy/serde",
	"github.com/eddy-go/eddy/serde/avro",
	"github.com/eddy-go/eddy/stores",
	"github.com/eddy-go/eddy/processor",
	"github.com/eddy-go/eddy/topology",
	"github.com/eddy-go/eddy/streams",
	"github.com/eddy-go/eddy/streams/streamstest",
}

// No exported declaration of a public package names a type of an internal
// package: not in a function's or method's signature, an exported field, an
// exported interface method, a variable's or constant's type, nor a type
// argument of any of these. (Unexported methods and fields may.)
func TestPublicSignaturesNameNoInternalType(t *testing.T) {
	// Type-check from the compiler's export data (go list -export builds
	// it, or finds it in the build cache).
	out, err := exec.Command("go", append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}"}, publicPackages...)...).Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "="); ok && file != "" {
			exports[path] = file
		}
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) { return os.Open(exports[path]) })
	for _, path := range publicPackages {
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatalf("importing %s: %v", path, err)
		}
		c := &internalTypes{seen: map[types.Type]bool{}}
		scope := pkg.Scope()
		for _, name := range scope.Names() {
			obj := scope.Lookup(name)
			if !obj.Exported() {
				continue
			}
			where := pkg.Name() + "." + name
			switch o := obj.(type) {
			case *types.TypeName:
				c.underlying(where, o.Type())
				for _, typ := range []types.Type{o.Type(), types.NewPointer(o.Type())} {
					ms := types.NewMethodSet(typ)
					for i := range ms.Len() {
						if m := ms.At(i).Obj(); m.Exported() {
							c.check(where+"."+m.Name(), m.Type())
						}
					}
				}
			default:
				c.check(where, obj.Type())
			}
		}
		for _, f := range c.found {
			t.Errorf("%s: %s", path, f)
		}
	}
}

type internalTypes struct {
	seen  map[types.Type]bool
	found []string
}

// underlying checks what a declared type is made of: exported fields of a
// struct, exported methods of an interface, or the type itself.
func (c *internalTypes) underlying(where string, typ types.Type) {
	switch u := typ.Underlying().(type) {
	case *types.Struct:
		for i := range u.NumFields() {
			if f := u.Field(i); f.Exported() {
				c.check(where+"."+f.Name(), f.Type())
			}
		}
	case *types.Interface:
		for i := range u.NumMethods() {
			if m := u.Method(i); m.Exported() {
				c.check(where+"."+m.Name(), m.Type())
			}
		}
	default:
		c.check(where, u)
	}
}

// check reports every internal named type typ refers to.
func (c *internalTypes) check(where string, typ types.Type) {
	if typ == nil || c.seen[typ] {
		return
	}
	c.seen[typ] = true
	defer delete(c.seen, typ)
	switch x := typ.(type) {
	case *types.Named:
		if p := x.Obj().Pkg(); p != nil && strings.Contains(p.Path()+"/", "/internal/") {
			c.found = append(c.found, where+" names "+x.String())
			return
		}
		if args := x.TypeArgs(); args != nil {
			for i := range args.Len() {
				c.check(where, args.At(i))
			}
		}
	case *types.Alias:
		c.check(where, types.Unalias(x))
	case *types.Pointer:
		c.check(where, x.Elem())
	case *types.Slice:
		c.check(where, x.Elem())
	case *types.Array:
		c.check(where, x.Elem())
	case *types.Map:
		c.check(where, x.Key())
		c.check(where, x.Elem())
	case *types.Chan:
		c.check(where, x.Elem())
	case *types.Signature:
		for _, tup := range []*types.Tuple{x.Params(), x.Results()} {
			for i := range tup.Len() {
				c.check(where, tup.At(i).Type())
			}
		}
	case *types.Struct, *types.Interface:
		c.underlying(where, x)
	}
}
