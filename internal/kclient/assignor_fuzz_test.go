package kclient

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The assignor's user data comes from the group's other members (any
// client that joins with eddy's protocol name): decoding it never panics,
// and what decodes encodes back to bytes that decode the same.
func FuzzDecodeMemberState(f *testing.F) {
	f.Add(encodeMemberState(MemberState{}))
	f.Add(encodeMemberState(MemberState{Process: "p-1", Offsets: map[int32]int64{0: 5, 7: 1 << 40, 9: -3}, Standbys: 1,
		Standby: []int32{1, 2}, Warmup: []int32{2}, AcceptableRecoveryLag: 10_000, MaxWarmups: 2, Tags: map[string]string{"zone": "a"}}))
	f.Add([]byte{userDataVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeMemberState(b)
		if err != nil {
			return
		}
		again, err := decodeMemberState(encodeMemberState(s))
		if err != nil || fmt.Sprintf("%+v", again) != fmt.Sprintf("%+v", s) {
			t.Fatalf("% x decoded as %+v, which encodes to something that decodes as %+v (%v)", b, s, again, err)
		}
	})
}

// A member's assignment user data, from the group's leader: decoding
// never panics, and what decodes encodes back the same (up to the order of
// its topics).
func FuzzDecodeMemberAssignment(f *testing.F) {
	f.Add(encodeMemberAssignment(nil, nil, false))
	f.Add(encodeMemberAssignment(map[string][]int32{"a": {0, 3}, "b-repartition": {3}}, map[string][]int32{"a": {3}}, true))
	f.Add([]byte{userDataVersion, 1, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeMemberAssignment(b)
		if err != nil {
			return
		}
		byTopic := func(tps []TP) map[string][]int32 {
			m := map[string][]int32{}
			for _, tp := range tps {
				m[tp.Topic] = append(m[tp.Topic], tp.Partition)
			}
			return m
		}
		again, err := decodeMemberAssignment(encodeMemberAssignment(byTopic(got.standby), byTopic(got.warmup), got.followUp))
		if len(b) == 0 {
			return // no user data: nothing assigned beside the partitions
		}
		norm := func(a memberAssignment) string {
			for _, tps := range [][]TP{a.standby, a.warmup} {
				slices.SortFunc(tps, func(x, y TP) int {
					if c := strings.Compare(x.Topic, y.Topic); c != 0 {
						return c
					}
					return int(x.Partition - y.Partition)
				})
			}
			return fmt.Sprint(a.standby, a.warmup, a.followUp)
		}
		if err != nil || norm(again) != norm(got) {
			t.Fatalf("% x decoded as %+v, which encodes to something that decodes as %+v (%v)", b, got, again, err)
		}
	})
}
