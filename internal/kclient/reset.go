package kclient

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Offset reset policies: where a consumer starts reading a partition the
// group has no committed offset for, or whose offset the log no longer
// holds (retention deleted it, or the topic was truncated).

// ResetPolicy is what a consumer does then.
type ResetPolicy int8

const (
	// ResetNone refuses: an error naming the partition, the missing offset
	// and the offsets the log holds.
	ResetNone ResetPolicy = iota
	// ResetEarliest starts at the partition's log start.
	ResetEarliest
	// ResetLatest starts at its end.
	ResetLatest
	// ResetByDuration starts at the first record at most Reset.Back old
	// (its end when there is none).
	ResetByDuration
)

// Reset is an offset reset policy (auto.offset.reset).
type Reset struct {
	Policy ResetPolicy
	// Back: how far back ResetByDuration starts.
	Back time.Duration
}

// TopicResets is the Config key of a consumer's per-topic reset policies,
// a map[string]Reset; topics not in it follow auto.offset.reset.
const TopicResets = "eddy.topic.offset.resets"

// ParseReset reads an auto.offset.reset value: earliest, latest, none or
// by_duration:<ISO-8601 duration> (Kafka 4.0's form, e.g.
// by_duration:PT1H or by_duration:P1DT12H), case-insensitively; also
// librdkafka's spellings (smallest, beginning, largest, end, error).
func ParseReset(s string) (Reset, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	switch v {
	case "earliest", "smallest", "beginning":
		return Reset{Policy: ResetEarliest}, nil
	case "latest", "largest", "end":
		return Reset{Policy: ResetLatest}, nil
	case "none", "error":
		return Reset{Policy: ResetNone}, nil
	}
	if d, ok := strings.CutPrefix(v, "by_duration:"); ok {
		back, err := ParseISODuration(d)
		if err != nil {
			return Reset{}, fmt.Errorf("offset reset %q: %w", s, err)
		}
		return Reset{Policy: ResetByDuration, Back: back}, nil
	}
	return Reset{}, fmt.Errorf("offset reset %q: want earliest, latest, none or by_duration:<ISO-8601 duration>", s)
}

// String is the policy in auto.offset.reset's form.
func (r Reset) String() string {
	switch r.Policy {
	case ResetEarliest:
		return "earliest"
	case ResetLatest:
		return "latest"
	case ResetByDuration:
		return "by_duration:" + ISODuration(r.Back)
	}
	return "none"
}

// ISODuration writes d as an ISO-8601 duration of days, hours, minutes and
// seconds (PT1H30M, P2DT0.5S), what by_duration takes.
func ISODuration(d time.Duration) string {
	if d <= 0 {
		return "PT0S"
	}
	var b strings.Builder
	b.WriteByte('P')
	if days := d / (24 * time.Hour); days > 0 {
		fmt.Fprintf(&b, "%dD", days)
		d -= days * 24 * time.Hour
	}
	if d == 0 {
		return b.String()
	}
	b.WriteByte('T')
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dH", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dM", m)
		d -= m * time.Minute
	}
	if d > 0 {
		b.WriteString(strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
		b.WriteByte('S')
	}
	return b.String()
}

// ParseISODuration reads PnDTnHnMn.nS (each part optional, at least one;
// days are 24 hours).
func ParseISODuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("duration %q: want an ISO-8601 duration such as PT1H, PT15M or P1DT12H", s)
	rest, ok := strings.CutPrefix(strings.ToUpper(s), "P")
	if !ok || rest == "" {
		return 0, bad
	}
	var total time.Duration
	inTime, parts := false, 0
	for rest != "" {
		if rest[0] == 'T' {
			if inTime || len(rest) == 1 {
				return 0, bad
			}
			inTime, rest = true, rest[1:]
			continue
		}
		i := strings.IndexAny(rest, "DHMS")
		if i <= 0 {
			return 0, bad
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil || n < 0 {
			return 0, bad
		}
		unit := map[byte]time.Duration{'D': 24 * time.Hour, 'H': time.Hour, 'M': time.Minute, 'S': time.Second}[rest[i]]
		if (rest[i] == 'D') == inTime {
			return 0, bad // days before T, the rest after it
		}
		if n*float64(unit) > float64(1<<62) {
			return 0, bad
		}
		total += time.Duration(n * float64(unit))
		rest = rest[i+1:]
		parts++
	}
	if parts == 0 {
		return 0, bad
	}
	return total, nil
}

// OffsetReset reports a reset: the partition's offset From was not in
// its log (or, From < 0, the group had none) and reading went on at To as
// Policy says. Poll returns it as an error for the caller to count and
// report; reading goes on.
type OffsetReset struct {
	TP       TP
	Policy   Reset
	From, To int64
	// Earliest is the partition's log start at the reset (-1: not looked
	// up).
	Earliest int64
}

// Skipped is how many offsets the reset jumped over (0 when it went back).
func (e *OffsetReset) Skipped() int64 {
	if e.From < 0 || e.To <= e.From {
		return 0
	}
	return e.To - e.From
}

func (e *OffsetReset) Error() string {
	return fmt.Sprintf("topic %s partition %d: offset %d is not in the partition (earliest available %d); reset to offset %d (%s), skipping %d offsets", e.TP.Topic, e.TP.Partition, e.From, e.Earliest, e.To, e.Policy, e.Skipped())
}

// OffsetOutOfRange is the error of a partition whose reset policy is none
// when its offset is not in the log, or the group has none for it (Offset
// < 0): reading it cannot go on.
type OffsetOutOfRange struct {
	TP     TP
	Offset int64
	// Earliest and Latest: the offsets the partition holds, [Earliest,
	// Latest).
	Earliest, Latest int64
}

func (e *OffsetOutOfRange) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("topic %s partition %d: no committed offset, and the offset reset policy is none (earliest available offset %d, end %d)", e.TP.Topic, e.TP.Partition, e.Earliest, e.Latest)
	}
	return fmt.Sprintf("topic %s partition %d: offset %d is not in the partition (earliest available offset %d, end %d), and the offset reset policy is none", e.TP.Topic, e.TP.Partition, e.Offset, e.Earliest, e.Latest)
}
