package protobuf_test

import (
	"fmt"

	"github.com/eddy-go/eddy/internal/testpb"
	"github.com/eddy-go/eddy/serde/protobuf"
	"github.com/eddy-go/eddy/serde/registry"
)

// A typed serde over a generated message: the Confluent wire format out
// (header, message indexes, message) and back. A real app passes
// registry.New(registry.Config{URL: …}); the in-memory registry keeps the
// example self-contained.
func Example() {
	reg := registry.NewInMemory()
	notes, err := protobuf.New[*testpb.First](reg, protobuf.RegisterFor("notes"))
	if err != nil {
		panic(err) // e.g. a *registry.IncompatibleError with the registry's message
	}
	b, err := notes.Serialize("notes", &testpb.First{Note: "hello"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("magic %d, schema id %d, message indexes %02x, %d bytes\n", b[0], b[4], b[5], len(b))
	back, err := notes.Deserialize("notes", b)
	if err != nil {
		panic(err)
	}
	fmt.Println(back.GetNote())
	latest, _ := reg.Latest("notes-value")
	fmt.Println(latest.Type, latest.References[0].Name)
	// Output:
	// magic 0, schema id 2, message indexes 00, 13 bytes
	// hello
	// PROTOBUF eddytest/money.proto
}
