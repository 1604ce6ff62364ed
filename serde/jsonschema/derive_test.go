package jsonschema

import (
	"reflect"
	"strings"
	"testing"
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
