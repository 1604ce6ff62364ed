package streamstest_test

import (
	"cmp"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Randomized parity: seeded random inputs for the parity scenarios (keys
// from one to many, bounded disorder plus very late records, tombstones,
// deletes and re-inserts on both sides of joins, foreign keys that never
// exist) run through Kafka Streams' TopologyTestDriver and eddy's driver
// and compared record by record, as the fixed scenarios are. A few seeds
// are checked in under testdata/parity (<scenario>@<seed>.in/.out) and run
// under `make test`; `make parity` generates many more into a scratch
// directory:
//
//	go test ./streams/streamstest -run TestParityRandom -parity.gen DIR -parity.seeds 200
//	(Kafka Streams writes DIR/*.out: parity/ with --all DIR)
//	go test ./streams/streamstest -run TestParityRandom -parity.check DIR [-parity.ks CMD]
//
// and reports every mismatch that is not a deliberate difference, with
// its input file and, given the command that runs the Kafka Streams side,
// the smallest input found that still shows it (shrink).
var (
	parityGen   = flag.String("parity.gen", "", "write random parity inputs into this directory")
	paritySeeds = flag.Int("parity.seeds", 200, "random inputs per scenario for -parity.gen")
	parityCheck = flag.String("parity.check", "", "compare eddy with the Kafka Streams outputs of the random inputs in this directory")
	parityOnly  = flag.String("parity.only", "", "with -parity.gen: only the scenarios this regular expression matches")
	parityKS    = flag.String("parity.ks", "", "with -parity.check: the command that runs Kafka Streams' side (Parity DIR --random), to shrink each mismatch to the smallest input that still shows it")
)

// topicGen makes one topic's values.
type topicGen struct {
	topic string
	value func(r *rand.Rand, keys int) string // "<null>" for a tombstone
	table bool                                // keys are rows: deletes and re-inserts
}

func fromList(list ...string) func(*rand.Rand, int) string {
	return func(r *rand.Rand, _ int) string { return list[r.IntN(len(list))] }
}

func withTombstones(p float64, f func(*rand.Rand, int) string) func(*rand.Rand, int) string {
	return func(r *rand.Rand, keys int) string {
		if r.Float64() < p {
			return "<null>"
		}
		return f(r, keys)
	}
}

var one = fromList("1")
var words = fromList("apple", "banana", "cherry", "date", "elder", "fig")

// randomScenarios are the scenarios with random inputs, and how each
// topic's values look.
var randomScenarios = map[string][]topicGen{
	"session-count":             {{topic: "in", value: one}},
	"session-emit-on-close":     {{topic: "in", value: one}},
	"hopping-count":             {{topic: "in", value: one}},
	"hopping-emit-on-close":     {{topic: "in", value: one}},
	"session-aggregate":         {{topic: "in", value: fromList("A", "B", "C", "D")}},
	"tumbling-count":            {{topic: "in", value: one}},
	"tumbling-emit-on-close":    {{topic: "in", value: one}},
	"sliding-aggregate":         {{topic: "in", value: fromList("A", "B", "C", "D")}},
	"sliding-emit-on-close":     {{topic: "in", value: one}},
	"tumbling-suppress":         {{topic: "in", value: one}},
	"sliding-suppress":          {{topic: "in", value: one}},
	"sliding-suppress-no-grace": {{topic: "in", value: one}},
	"session-suppress":          {{topic: "in", value: one}},
	"table-suppress-time-limit": {{topic: "in", value: one}},
	"stream-stream-join": {{topic: "ls", value: func(r *rand.Rand, _ int) string { return "L" + strconv.Itoa(r.IntN(100)) }},
		{topic: "rs", value: func(r *rand.Rand, _ int) string { return "R" + strconv.Itoa(r.IntN(100)) }}},
	"stream-stream-join-asymmetric": {{topic: "ls", value: func(r *rand.Rand, _ int) string { return "L" + strconv.Itoa(r.IntN(100)) }},
		{topic: "rs", value: func(r *rand.Rand, _ int) string { return "R" + strconv.Itoa(r.IntN(100)) }}},
	"fk-join": {
		{topic: "orders", table: true, value: withTombstones(0.15, func(r *rand.Rand, keys int) string {
			if r.IntN(8) == 0 {
				return "-:" + strconv.Itoa(1+r.IntN(5)) // no product
			}
			// Some products never exist (p9…).
			return "p" + strconv.Itoa(r.IntN(keys+2)) + ":" + strconv.Itoa(1+r.IntN(5))
		})},
		{topic: "products", table: true, value: withTombstones(0.2, words)},
	},
	"versioned-fk-join": {
		{topic: "orders", table: true, value: withTombstones(0.15, func(r *rand.Rand, keys int) string {
			if r.IntN(8) == 0 {
				return "-:" + strconv.Itoa(1+r.IntN(5)) // no product
			}
			// Some products never exist (p9…).
			return "p" + strconv.Itoa(r.IntN(keys+2)) + ":" + strconv.Itoa(1+r.IntN(5))
		})},
		{topic: "products", table: true, value: withTombstones(0.2, words)},
	},
	"table-groupby-count": {{topic: "users", table: true, value: withTombstones(0.2, fromList("eu", "us", "apac"))}},
	"table-groupby-reduce": {{topic: "scores", table: true, value: withTombstones(0.2, func(r *rand.Rand, _ int) string {
		return fromList("red", "blue", "green")(r, 0) + ":" + strconv.Itoa(r.IntN(20))
	})}},
	"table-table-join": {{topic: "lt", table: true, value: withTombstones(0.2, fromList("a1", "a2", "a3"))},
		{topic: "rt", table: true, value: withTombstones(0.2, fromList("b1", "b2", "b3"))}},
	"stream-table-join": {{topic: "users", table: true, value: withTombstones(0.2, fromList("eu", "us"))},
		{topic: "clicks", value: fromList("c1", "c2", "c3")}},
	"versioned-table": {{topic: "in", table: true, value: withTombstones(0.2, words)}},
	"versioned-stream-table-join": {{topic: "users", table: true, value: withTombstones(0.2, fromList("eu", "us", "apac"))},
		{topic: "clicks", value: withTombstones(0.15, fromList("c1", "c2", "c3"))}},
	"versioned-stream-table-join-grace": {{topic: "users", table: true, value: withTombstones(0.2, fromList("eu", "us", "apac"))},
		{topic: "clicks", value: withTombstones(0.15, fromList("c1", "c2", "c3"))}},
	"versioned-table-table-join": {{topic: "lt", table: true, value: withTombstones(0.2, fromList("a1", "a2", "a3"))},
		{topic: "rt", table: true, value: withTombstones(0.2, fromList("b1", "b2", "b3"))}},
	"reduce":                {{topic: "in", value: words}},
	"aggregate-repartition": {{topic: "in", value: words}},
	"table-ops":             {{topic: "tin", table: true, value: withTombstones(0.2, fromList("hello", "xray", "hi", "x"))}},
	"totable":               {{topic: "in", value: withTombstones(0.2, words)}},
}

// edges are the timestamps where a scenario's windows or versioned state
// change state, which random timestamps rarely hit: offsets from an
// earlier record's timestamp (0 for an equal timestamp; a sliding window's
// end plus grace; a session's gap, or its end plus gap plus grace), points
// on a grid (fixed windows' ends plus grace), and distances behind the
// latest timestamp so far (a versioned store's history retention, a grace
// period, each ±1).
type edges struct {
	after  []int64
	grid   int64
	at     []int64
	behind []int64
	// again: a table row's update (or tombstone) at the timestamp of an
	// earlier record of that row: its latest value's, often.
	again bool
}

// Sliding windows of 50 ms: the window a record ends closes at +grace, its
// right window [t+1, t+51] at +51+grace.
var (
	tumblingEdges = edges{after: []int64{0}, grid: 100, at: []int64{19, 20, 21, 0}} // size 100, grace 20
	hoppingEdges  = edges{after: []int64{0}, grid: 40, at: []int64{29, 30, 31, 0}}  // size 100, advance 40, grace 50: ends+grace = 40k+150
	slidingEdges  = edges{after: []int64{0, 1, 29, 30, 31, 50, 51, 80, 81, 82}}     // grace 30
	noGraceEdges  = edges{after: []int64{0, 1, 50, 51, 52}}                         // grace 0
	sessionEdges  = edges{after: []int64{0, 29, 30, 31, 49, 50, 51}}                // gap 30, grace 20
	limitEdges    = edges{after: []int64{0, 49, 50, 51}}                            // time limit 50
	// Versioned tables: an equal timestamp (an update, or a tombstone, at
	// the latest value's time) and the history retention's horizon.
	history100Edges = edges{after: []int64{0, 1}, behind: []int64{99, 100, 101}, again: true}
	history200Edges = edges{after: []int64{0, 1}, behind: []int64{199, 200, 201}, again: true}
	// History 200, grace 50 (inner) and 30 (left): the buffer's horizons too.
	graceEdges = edges{after: []int64{0, 1, 29, 30, 31, 49, 50, 51}, behind: []int64{29, 30, 31, 49, 50, 51, 199, 200, 201}, again: true}
)

// scenarioEdges are the edges each windowed scenario's inputs aim at.
var scenarioEdges = map[string]edges{
	"tumbling-count": tumblingEdges, "tumbling-emit-on-close": tumblingEdges, "tumbling-suppress": tumblingEdges,
	"hopping-count": hoppingEdges, "hopping-emit-on-close": hoppingEdges,
	"sliding-aggregate": slidingEdges, "sliding-emit-on-close": slidingEdges, "sliding-suppress": slidingEdges,
	"sliding-suppress-no-grace": noGraceEdges,
	"session-count":             sessionEdges, "session-emit-on-close": sessionEdges, "session-aggregate": sessionEdges,
	"session-suppress":          sessionEdges,
	"table-suppress-time-limit": limitEdges,
	"versioned-table":           history100Edges, "versioned-table-table-join": history100Edges, "versioned-fk-join": history100Edges,
	"versioned-stream-table-join": history200Edges, "versioned-stream-table-join-grace": graceEdges,
}

// randomInput is one seeded input: 20–80 records, 1–8 keys, timestamps
// moving forward by 0–30 ms with disorder up to 60 ms, and now and then a
// record 300–600 ms behind (late for every window here). In a windowed
// scenario, a quarter of the records are put on one of its edges instead
// (chosen by a second generator, so the rest of the input stays what the
// seed makes).
func randomInput(name string, seed uint64) []parityRec {
	gens := randomScenarios[name]
	r := rand.New(rand.NewPCG(seed, uint64(len(name))))
	ed, hasEdges := scenarioEdges[name]
	er := rand.New(rand.NewPCG(seed, uint64(len(name))+1<<32))
	keys := 1 + r.IntN(8)
	n := 20 + r.IntN(61)
	now := int64(1000)
	var out []parityRec
	for range n {
		g := gens[r.IntN(len(gens))]
		now += r.Int64N(31)
		ts := now
		switch x := r.IntN(20); {
		case x < 5:
			ts -= r.Int64N(61)
		case x == 5:
			ts -= 300 + r.Int64N(301)
		}
		var again *parityRec // the earlier record of the row this one updates at its time
		if hasEdges && len(out) > 0 && er.IntN(4) == 0 {
			switch {
			case ed.again && g.table && er.IntN(3) == 0:
				var recent []int // the table's records among the last eight
				for i := max(0, len(out)-8); i < len(out); i++ {
					if out[i].topic == g.topic {
						recent = append(recent, i)
					}
				}
				if len(recent) > 0 {
					again = &out[recent[er.IntN(len(recent))]]
					ts = again.ts
				}
			case len(ed.behind) > 0 && er.IntN(3) == 0:
				latest := slices.MaxFunc(out, func(a, b parityRec) int { return cmp.Compare(a.ts, b.ts) }).ts
				ts = latest - ed.behind[er.IntN(len(ed.behind))]
			case ed.grid > 0 && er.IntN(2) == 0:
				ts = ts/ed.grid*ed.grid + ed.at[er.IntN(len(ed.at))]
			default:
				ts = out[er.IntN(len(out))].ts + ed.after[er.IntN(len(ed.after))]
			}
			now = max(now, ts-er.Int64N(20)) // an edge may move time on, not far back
		}
		k := "k" + strconv.Itoa(r.IntN(keys))
		if strings.HasPrefix(g.topic, "product") {
			k = "p" + strconv.Itoa(r.IntN(keys))
		}
		if again != nil {
			k = again.key
		}
		v := g.value(r, keys)
		out = append(out, parityRec{topic: g.topic, key: k, value: v, null: v == "<null>", ts: max(ts, 0)})
	}
	return out
}

func writeInput(path string, recs []parityRec) error {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s|%s|%s|%d\n", r.topic, r.key, r.value, r.ts)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func TestParityRandom(t *testing.T) {
	switch {
	case *parityGen != "":
		only, err := regexp.Compile(*parityOnly)
		if err != nil {
			t.Fatal(err)
		}
		names := make([]string, 0, len(randomScenarios))
		for name := range randomScenarios {
			if only.MatchString(name) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			for seed := range uint64(*paritySeeds) {
				if err := writeInput(filepath.Join(*parityGen, fmt.Sprintf("%s@%d.in", name, seed)), randomInput(name, seed)); err != nil {
					t.Fatal(err)
				}
			}
		}
		t.Logf("wrote %d random inputs for %d scenarios into %s", len(names)**paritySeeds, len(names), *parityGen)
	case *parityCheck != "":
		files, err := filepath.Glob(filepath.Join(*parityCheck, "*@*.out"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Kafka Streams outputs in %s: %v", *parityCheck, err)
		}
		bad := map[string]int{}
		for _, f := range files {
			name := strings.TrimSuffix(filepath.Base(f), ".out")
			if diff := checkParity(t, *parityCheck, name); diff != "" {
				base, _, _ := strings.Cut(name, "@")
				bad[base]++
				in := strings.TrimSuffix(f, ".out") + ".in"
				if *parityKS != "" && bad[base] <= 3 { // shrinking takes a while: the first few per scenario
					small, smallDiff := shrink(t, name, readRecords(t, in))
					path := strings.TrimSuffix(in, ".in") + ".min.in"
					if err := writeInput(path, small); err != nil {
						t.Fatal(err)
					}
					t.Errorf("%s (input %s; smallest input that still differs, %d records: %s):\n%s", name, in, len(small), path, smallDiff)
					continue
				}
				t.Errorf("%s (input %s):\n%s", name, in, diff)
			}
		}
		t.Logf("%d random scenarios compared, mismatches per scenario: %v", len(files), bad)
	default:
		// Under make test: the checked-in seeds (run by
		// TestParityWithKafkaStreams) are what the generator makes, so
		// regenerating them with Kafka Streams compares the same inputs.
		files, _ := filepath.Glob("testdata/parity/*@*.in")
		seen := map[string]bool{}
		for _, f := range files {
			name := strings.TrimSuffix(filepath.Base(f), ".in")
			base, seedText, _ := strings.Cut(name, "@")
			seed, err := strconv.ParseUint(seedText, 10, 64)
			if _, ok := randomScenarios[base]; !ok || err != nil {
				t.Errorf("%s: not a random input of a scenario", f)
				continue
			}
			seen[base] = true
			if got, want := readRecords(t, f), randomInput(base, seed); !slices.Equal(got, want) {
				t.Errorf("%s is not what the generator makes for seed %d (regenerate with scripts/parity.sh)", f, seed)
			}
		}
		for name := range randomScenarios {
			if !seen[name] {
				t.Errorf("no checked-in random input for %s (scripts/parity.sh writes them)", name)
			}
		}
	}
}

// shrink returns the smallest input it finds that still makes scenario
// name's outputs differ, and how they differ. Each round tries dropping
// every run of n/2, n/4, …, 1 consecutive records and keeps the largest
// drop after which the difference stays, until no drop keeps it; a round's
// candidates run through Kafka Streams in one JVM (-parity.ks).
func shrink(t *testing.T, name string, recs []parityRec) ([]parityRec, string) {
	t.Helper()
	base, _, _ := strings.Cut(name, "@")
	diff := ""
	for {
		dir := t.TempDir()
		type cut struct{ from, to int }
		var cuts []cut
		for size := len(recs) / 2; size >= 1; size /= 2 {
			for from := 0; from+size <= len(recs); from += size {
				cuts = append(cuts, cut{from, from + size})
			}
		}
		for i, c := range cuts {
			if err := writeInput(filepath.Join(dir, fmt.Sprintf("%s@shrink%04d.in", base, i)), slices.Delete(slices.Clone(recs), c.from, c.to)); err != nil {
				t.Fatal(err)
			}
		}
		if len(cuts) == 0 {
			return recs, diff
		}
		cmd := exec.Command("sh", "-c", *parityKS+` "$0" --random`, dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("running Kafka Streams (%s): %v\n%s", *parityKS, err, out)
		}
		smaller := false
		for i, c := range cuts { // largest cuts first
			if d := checkParity(t, dir, fmt.Sprintf("%s@shrink%04d", base, i)); d != "" {
				recs, diff, smaller = slices.Delete(recs, c.from, c.to), d, true
				break
			}
		}
		if !smaller {
			return recs, diff
		}
	}
}

// subsequence says whether sub's lines appear in all, in order.
func subsequence(sub, all []string) bool {
	i := 0
	for _, l := range all {
		if i < len(sub) && l == sub[i] {
			i++
		}
	}
	return i == len(sub)
}

// lostFinalResults: emitting on window close, eddy never expires a window
// before its final result went out; Kafka Streams drops the segment when
// stream time jumps past its retention before the throttled look, and the
// window's result is lost. Otherwise the outputs are the same, in order.
func lostFinalResults(eddy, ks []string) bool { return len(eddy) > len(ks) && subsequence(ks, eddy) }

// knownDifferences accept outputs that differ from Kafka Streams' only by
// one of the README's deliberate differences.
var knownDifferences = map[string]func(eddy, kafkaStreams []string) bool{
	"tumbling-emit-on-close":        lostFinalResults,
	"sliding-emit-on-close":         lostFinalResults,
	"session-emit-on-close":         lostFinalResults,
	"hopping-emit-on-close":         lostFinalResults,
	"stream-stream-join":            unjoinedEmittedElsewhere,
	"stream-stream-join-asymmetric": unjoinedEmittedElsewhere,
}

// knownInputDifferences accept outputs that differ from Kafka Streams' on
// an input that has the shape of one of the README's deliberate
// differences (one that shows in the input, not in the output's shape).
var knownInputDifferences = map[string]func(in []parityRec) bool{
	"versioned-table":                   tombstoneAtLatest,
	"versioned-stream-table-join":       tombstoneAtLatest,
	"versioned-stream-table-join-grace": tombstoneAtLatest,
	"versioned-table-table-join":        tombstoneAtLatest,
	"versioned-fk-join":                 tombstoneAtLatest,
}

// tombstoneAtLatest: a versioned table's tombstone with the timestamp of
// the key's latest value, followed by an update of that key older than
// it. eddy records the deletion, so the older update is history (valid
// until the tombstone); Kafka Streams deletes the latest value without
// recording the tombstone, so the older update becomes the latest value
// and is what later lookups find. Only an input with that sequence (on a
// table topic) may differ.
func tombstoneAtLatest(in []parityRec) bool {
	type row struct{ topic, key string }
	latest := map[row]parityRec{}
	deletedAt := map[row]int64{}
	for _, r := range in {
		if r.topic == "clicks" { // the only stream topic of these scenarios
			continue
		}
		k := row{r.topic, r.key}
		if at, ok := deletedAt[k]; ok && r.ts < at {
			return true
		}
		l, seen := latest[k]
		switch {
		case seen && r.null && r.ts == l.ts && !l.null:
			deletedAt[k] = r.ts
			latest[k] = r
		case !seen || r.ts >= l.ts:
			latest[k] = r
		}
	}
	return false
}

// unjoinedEmittedElsewhere: a left or outer stream–stream join emits a
// record that found no partner when its window closes; Kafka Streams may
// emit it later or not before the input ends. Joined records and the inner
// join must be identical, in order; the unjoined ones Kafka Streams emitted
// must be among eddy's.
func unjoinedEmittedElsewhere(eddy, ks []string) bool {
	unjoined := func(l string) bool { return strings.Contains(l, "|?+") || strings.Contains(l, "+?|") }
	split := func(lines []string) (joined, alone []string) {
		for _, l := range lines {
			if unjoined(l) {
				alone = append(alone, l)
			} else {
				joined = append(joined, l)
			}
		}
		return joined, alone
	}
	ej, ea := split(eddy)
	kj, ka := split(ks)
	if !slices.Equal(ej, kj) {
		return false
	}
	// Compared without the timestamp order: the same record can come
	// out at another point.
	count := map[string]int{}
	for _, l := range ea {
		count[l]++
	}
	for _, l := range ka {
		if count[l] == 0 {
			return false
		}
		count[l]--
	}
	return true
}

// The deliberate difference tombstoneAtLatest accepts, pinned: a
// tombstone at the latest value's timestamp is recorded, so an older
// update that follows is history, and a click after both joins nothing
// (Kafka Streams joins it with the older update, "c1/us"). Only inputs of
// that shape are accepted as differing.
func TestATombstoneAtTheLatestTimestampIsRecorded(t *testing.T) {
	in := []parityRec{
		{topic: "users", key: "k0", value: "eu", ts: 1000},
		{topic: "users", key: "k0", value: "<null>", null: true, ts: 1000},
		{topic: "users", key: "k0", value: "us", ts: 900},
		{topic: "clicks", key: "k0", value: "c1", ts: 1100},
	}
	got, _ := runScenario(t, scenarios["versioned-stream-table-join"], in)
	if want := []string{"left|k0|c1/?|1100"}; !slices.Equal(got, want) {
		t.Fatalf("eddy: %v, want %v", got, want)
	}
	if !tombstoneAtLatest(in) {
		t.Fatal("the input is not recognised as the difference's shape")
	}
	for i, other := range [][]parityRec{
		in[:2], // no older update after the tombstone
		{in[0], {topic: "users", key: "k0", value: "<null>", null: true, ts: 1001}, in[2]}, // a later tombstone
		{in[0], {topic: "users", key: "k1", value: "<null>", null: true, ts: 1000}, in[2]}, // another key
		{in[0], in[1], {topic: "users", key: "k0", value: "us", ts: 1000}},                 // an update at the same time
	} {
		if tombstoneAtLatest(other) {
			t.Errorf("input %d taken for the difference's shape: %v", i, other)
		}
	}
}
