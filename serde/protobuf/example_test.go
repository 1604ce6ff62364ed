package protobuf_test

import (
	"fmt"
	"log"

	"github.com/eddy-go/eddy/internal/testpb"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/serde/protobuf"
	"github.com/eddy-go/eddy/serde/registry"
	"github.com/eddy-go/eddy/topology"
)

// A typed serde over a generated message, registered when created, read
// and written by a topology. (Not run: it needs a registry;
// integration/protobuf_test.go runs the same against a real one.)
func Example() {
	reg, err := registry.New(registry.Config{URL: "http://localhost:8081"})
	if err != nil {
		log.Fatal(err)
	}
	notes, err := protobuf.New[*testpb.First](reg, protobuf.RegisterFor("notes"))
	if err != nil {
		log.Fatal(err) // e.g. a *registry.IncompatibleError with the registry's message
	}
	b := topology.NewBuilder()
	topology.Stream(b, "notes", topology.Consumed(serde.String(), notes)).
		Filter(func(_ string, n *testpb.First) bool { return n.GetNote() != "" }).
		To("non-empty-notes", topology.Produced(serde.String(), notes))
	fmt.Println(notes.Subject("notes", (&testpb.First{}).ProtoReflect().Descriptor()))
}
