package streamstest_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

// Tombstones on a stream (here a session count's ToStream: a merge deletes
// the sessions it replaces) stay tombstones through Map, MapValues and
// FlatMapValues, which never hand a mapper the zero value of a deletion;
// MapValuesNullable sees them as nil and can make them.
func TestTombstonesThroughValueMappers(t *testing.T) {
	str, i64 := serde.String(), serde.Int64()
	b := topology.NewBuilder()
	sessions := topology.SessionCount(topology.Stream(b, "in", topology.Consumed(str, str)).GroupByKey().
		WindowedBySession(topology.Sessions(10*time.Second, 0))).ToStream()
	var seen []string
	keyed := topology.Map(sessions, func(k serde.Windowed[string], n int64) (string, int64) {
		return fmt.Sprintf("%s@%d", k.Key, k.Window.Start), n
	})
	topology.MapValues(keyed, func(n int64) string {
		seen = append(seen, fmt.Sprint(n))
		return fmt.Sprint(n)
	}).To("mapped", topology.Produced(str, str))
	topology.FlatMapValues(keyed, func(n int64) []int64 { return []int64{n, n * 10} }).To("flat", topology.Produced(str, i64))
	topology.MapValuesNullable(keyed, func(_ string, n *int64) *string {
		s := "deleted"
		if n != nil {
			s = fmt.Sprint(*n)
		}
		if s == "1" {
			return nil // and a value turned into a tombstone
		}
		return &s
	}).To("nullable", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top, streamstest.Options{CacheMaxBytes: -1})
	in := streamstest.Input(d, "in", str, str)
	in.PipeAt("a", "x", 1000)
	in.PipeAt("a", "x", 5000) // merges: the session at 1000 is deleted

	read := func(topic string) string { return readStrings(d, topic) }
	if got, want := read("mapped"), "a@1000=1, a@1000=<tombstone>, a@1000=2"; got != want {
		t.Errorf("MapValues: got %q, want %q", got, want)
	}
	if !slices.Equal(seen, []string{"1", "2"}) {
		t.Errorf("MapValues' mapper saw %v, want only the two counts", seen)
	}
	var flat []string
	for _, r := range streamstest.Output(d, "flat", str, i64).ReadRecords() {
		v := fmt.Sprint(r.Value)
		if r.NullValue {
			v = "<tombstone>"
		}
		flat = append(flat, r.Key+"="+v)
	}
	if got, want := strings.Join(flat, ", "), "a@1000=1, a@1000=10, a@1000=<tombstone>, a@1000=2, a@1000=20"; got != want {
		t.Errorf("FlatMapValues: got %q, want %q", got, want)
	}
	if got, want := read("nullable"), "a@1000=<tombstone>, a@1000=deleted, a@1000=2"; got != want {
		t.Errorf("MapValuesNullable: got %q, want %q", got, want)
	}
}

// TableToStream re-keys a table's changes, deletions included.
func TestTableToStreamRekeys(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	users := topology.Table(b, "users", topology.Consumed(str, str), topology.Materialized[string, string]("users-store"))
	topology.TableToStream(users, func(id, region string) string { return "user/" + id }).
		To("out", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top, streamstest.Options{CacheMaxBytes: -1})
	in := streamstest.Input(d, "users", str, str)
	in.Pipe("u1", "eu")
	in.PipeTombstone("u1")
	var got []string
	for _, r := range streamstest.Output(d, "out", str, str).ReadRecords() {
		v := r.Value
		if r.NullValue {
			v = "<tombstone>"
		}
		got = append(got, r.Key+"="+v)
	}
	if g, want := strings.Join(got, ", "), "user/u1=eu, user/u1=<tombstone>"; g != want {
		t.Fatalf("got %q, want %q", g, want)
	}
}

// A stream's tombstones (here a table's deletions through ToStream) are
// never judged or seen as zero values: Filter and FilterNot pass them
// through without calling the predicate (the README's
// Filter(v != "") keeps the deletion), FilterNullable sees them as nil and
// may drop them, Peek and Foreach skip them while PeekNullable and
// ForeachNullable see nil, and Split sends a deletion to every branch.
func TestTombstonesThroughFiltersPeeksAndBranches(t *testing.T) {
	str := serde.String()
	b := topology.NewBuilder()
	changes := topology.Table(b, "users", topology.Consumed(str, str), topology.Materialized[string, string]("users-store")).ToStream()
	var judged, peeked, nullablePeeked, each, nullableEach []string
	show := func(v *string) string {
		if v == nil {
			return "nil"
		}
		return *v
	}
	changes.Filter(func(_, v string) bool { judged = append(judged, v); return v != "" }).To("filtered", topology.Produced(str, str))
	changes.FilterNot(func(_, v string) bool { return v == "" }).To("filtered-not", topology.Produced(str, str))
	changes.FilterNullable(func(_ string, v *string) bool { return v != nil }).To("no-deletions", topology.Produced(str, str))
	changes.Peek(func(k, v string) { peeked = append(peeked, k+"="+v) }).
		PeekNullable(func(k string, v *string) { nullablePeeked = append(nullablePeeked, k+"="+show(v)) }).
		To("peeked", topology.Produced(str, str))
	changes.Foreach(func(k, v string) { each = append(each, k+"="+v) })
	changes.ForeachNullable(func(k string, v *string) { nullableEach = append(nullableEach, k+"="+show(v)) })
	split := changes.Split(topology.Named("by-region-"))
	split.Branch(func(_, v string) bool { return v == "eu" }, topology.Named("eu")).To("eu", topology.Produced(str, str))
	split.Default(topology.Named("other")).To("other", topology.Produced(str, str))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := streamstest.New(t, top, streamstest.Options{CacheMaxBytes: -1})
	in := streamstest.Input(d, "users", str, str)
	in.Pipe("ann", "eu")
	in.Pipe("bob", "us")
	in.PipeTombstone("ann")

	read := func(topic string) string { return readStrings(d, topic) }
	all := "ann=eu, bob=us, ann=<tombstone>"
	for topic, want := range map[string]string{
		"filtered": all, "filtered-not": all, "no-deletions": "ann=eu, bob=us", "peeked": all,
		"eu": "ann=eu, ann=<tombstone>", "other": "bob=us, ann=<tombstone>",
	} {
		if got := read(topic); got != want {
			t.Errorf("%s: got %q, want %q", topic, got, want)
		}
	}
	for what, got := range map[string][]string{"Filter's predicate": judged, "Peek": peeked, "Foreach": each} {
		if len(got) != 2 || slices.ContainsFunc(got, func(s string) bool { return s == "" || strings.HasSuffix(s, "=") }) {
			t.Errorf("%s saw %q: want the two values only, never a deletion's zero value", what, got)
		}
	}
	for what, got := range map[string][]string{"PeekNullable": nullablePeeked, "ForeachNullable": nullableEach} {
		if want := []string{"ann=eu", "bob=us", "ann=nil"}; !slices.Equal(got, want) {
			t.Errorf("%s saw %q, want %q", what, got, want)
		}
	}
}

// readStrings returns a string topic's records as "key=value, …", a
// tombstone's value shown as <tombstone>.
func readStrings(d *streamstest.Driver, topic string) string {
	var got []string
	for _, r := range streamstest.Output(d, topic, serde.String(), serde.String()).ReadRecords() {
		v := r.Value
		if r.NullValue {
			v = "<tombstone>"
		}
		got = append(got, r.Key+"="+v)
	}
	return strings.Join(got, ", ")
}
