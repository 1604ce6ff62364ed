package registry

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHeader(t *testing.T) {
	b := AppendHeader([]byte{}, 258)
	if string(b) != "\x00\x00\x00\x01\x02" {
		t.Fatalf("header % x", b)
	}
	id, rest, err := ParseHeader(append(b, 'x'))
	if err != nil || id != 258 || string(rest) != "x" {
		t.Fatalf("%d %q %v", id, rest, err)
	}
	for _, bad := range [][]byte{nil, {0, 0, 0}, {1, 0, 0, 0, 1}} {
		if _, _, err := ParseHeader(bad); !errors.Is(err, ErrWireFormat) {
			t.Fatalf("% x: %v", bad, err)
		}
	}
}

func TestSubjectStrategies(t *testing.T) {
	for _, c := range []struct {
		s    SubjectStrategy
		key  bool
		want string
	}{{TopicName, false, "t-value"}, {TopicName, true, "t-key"}, {RecordName, false, "shop.Order"}, {TopicRecordName, true, "t-shop.Order"}} {
		if got := c.s.Subject("t", c.key, "shop.Order"); got != c.want {
			t.Fatalf("%v key=%v: %q, want %q", c.s, c.key, got, c.want)
		}
	}
}

// A registry's refusal reads as one line: the HTTP status, its message and
// its error code, not the raw response body.
func TestRefusalIsOneCleanLine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintln(w, `{"error_code":40403,"message":"Schema 99 not found"}`)
	}))
	defer srv.Close()
	c, err := New(Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ByID(99)
	const want = "schema registry: looking up schema id 99: HTTP 404: Schema 99 not found (error code 40403)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
	var re *RequestError
	if !errors.As(err, &re) || re.Status != 404 || re.Code != 40403 {
		t.Fatalf("%v: want a *RequestError with status 404, code 40403", err)
	}
}
