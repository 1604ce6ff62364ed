package jsonschema

import (
	"reflect"
	"strings"
	"testing"

	"github.com/eddy-go/eddy/serde/registry"
)

type node struct {
	Next *node `json:"next"`
}

func TestDeriveRefusesWhatItCannotDescribe(t *testing.T) {
	for _, c := range []struct {
		t    reflect.Type
		want string
	}{
		{reflect.TypeFor[node](), "recursive"},
		{reflect.TypeFor[map[int]string](), "only string keys"},
		{reflect.TypeFor[struct{ C chan int }](), "cannot be written as JSON"},
	} {
		if _, err := Derive(c.t); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%v: %v, want an error saying %q", c.t, err, c.want)
		}
	}
}

type fuzzed struct {
	ID    string            `json:"id"`
	Items []map[string]int  `json:"items"`
	Tags  map[string]string `json:"tags,omitempty"`
	Ptr   *float64          `json:"ptr"`
}

// Any bytes read by a validating serde are a value or an error, never a
// panic.
func FuzzDeserialize(f *testing.F) {
	s, err := New[fuzzed](registry.NewInMemory(), Validate())
	if err != nil {
		f.Fatal(err)
	}
	good, err := s.Serialize("t", fuzzed{ID: "a", Items: []map[string]int{{"x": 1}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		s.Deserialize("t", b)
	})
}
