package stores

// TTLClock says what time a store's time to live is measured in
// (KeyValueBuilder.WithTTL).
type TTLClock int

const (
	// StreamTime measures the time to live in the task's stream time (the
	// largest record timestamp it processed): deterministic and
	// reproducible. The default.
	StreamTime TTLClock = iota
	// WallClockTime measures it against the wall clock: entries expire
	// even while no records arrive, but a replay after a crash may expire a
	// different set at a different point.
	WallClockTime
)

func (c TTLClock) String() string {
	if c == WallClockTime {
		return "wall-clock time"
	}
	return "stream time"
}
