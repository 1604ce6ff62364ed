package kclient

import (
	"testing"
	"time"
)

func TestParseReset(t *testing.T) {
	for in, want := range map[string]Reset{
		"earliest": {Policy: ResetEarliest}, "Smallest": {Policy: ResetEarliest}, "latest": {Policy: ResetLatest},
		"end": {Policy: ResetLatest}, "none": {Policy: ResetNone}, "error": {Policy: ResetNone},
		"by_duration:PT1H":        {Policy: ResetByDuration, Back: time.Hour},
		"BY_DURATION:P1DT12H30M":  {Policy: ResetByDuration, Back: 36*time.Hour + 30*time.Minute},
		"by_duration:PT0.5S":      {Policy: ResetByDuration, Back: 500 * time.Millisecond},
		"by_duration:P2D":         {Policy: ResetByDuration, Back: 48 * time.Hour},
		" by_duration:pt15m ":     {Policy: ResetByDuration, Back: 15 * time.Minute},
		"by_duration:PT90061.25S": {Policy: ResetByDuration, Back: 90061250 * time.Millisecond},
	} {
		got, err := ParseReset(in)
		if err != nil || got != want {
			t.Errorf("ParseReset(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if err == nil {
			again, err := ParseReset(got.String())
			if err != nil || again != got {
				t.Errorf("ParseReset(%q.String() = %q) = %+v, %v", in, got.String(), again, err)
			}
		}
	}
	for _, in := range []string{"", "begin", "by_duration:", "by_duration:1h", "by_duration:P", "by_duration:PT", "by_duration:P1H",
		"by_duration:PT1D", "by_duration:PT-1H", "by_duration:PTxS", "by_duration:P99999999999D"} {
		if _, err := ParseReset(in); err == nil {
			t.Errorf("ParseReset(%q): no error", in)
		}
	}
}
