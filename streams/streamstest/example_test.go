package streamstest_test

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams/streamstest"
	"github.com/eddy-go/eddy/topology"
)

func splitWords(line string) []string {
	return strings.FieldsFunc(strings.ToLower(line), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

func wordCount() *topology.Topology {
	b := topology.NewBuilder()
	lines := topology.Stream(b, "text-input", topology.Consumed(serde.String(), serde.String()))
	words := topology.FlatMapValues(lines, splitWords)
	byWord := topology.GroupBy(words, func(_, w string) string { return w },
		topology.Grouped(serde.String(), serde.String()))
	counts := topology.Count(byWord, topology.Materialized[string, int64]("counts"))
	counts.ToStream().To("word-counts", topology.Produced(serde.String(), serde.Int64()))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

// A word count run in the test driver: the same nodes and stores as on
// Kafka, no broker.
func Example() {
	d, err := streamstest.Open(wordCount())
	if err != nil {
		panic(err)
	}
	defer d.Close()
	in := streamstest.Input(d, "text-input", serde.String(), serde.String())
	out := streamstest.Output(d, "word-counts", serde.String(), serde.Int64())

	in.Pipe("", "Hello world, hello")
	in.Pipe("", "World of streams")

	counts := streamstest.ReadKeyValueMap(out)
	words := make([]string, 0, len(counts))
	for w := range counts {
		words = append(words, w)
	}
	slices.Sort(words)
	for _, w := range words {
		fmt.Printf("%s\t%d\n", w, counts[w])
	}
	// Output:
	// hello	2
	// of	1
	// streams	1
	// world	2
}
