package franz

import (
	"fmt"
	"testing"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/processor"
)

// The assignor's user data comes from the group's other members (any
// client that joins with eddy's protocol name): decoding it never panics,
// and what decodes encodes back to bytes that decode the same.
func FuzzDecodeMemberState(f *testing.F) {
	id := func(s int, p int32) processor.TaskID { return processor.TaskID{Subtopology: s, Partition: p} }
	full := kclient.MemberState{Process: "p-1", Offsets: map[processor.TaskID]int64{id(0, 0): 5, id(0, 7): 1 << 40, id(2, 9): -3}, Standbys: 1,
		Standby: []processor.TaskID{id(0, 1), id(1, 2)}, Warmup: []processor.TaskID{id(1, 2)}, AcceptableRecoveryLag: 10_000, MaxWarmups: 2,
		Tags: map[string]string{"zone": "a"}}
	f.Add(encodeMemberState(kclient.MemberState{}))
	f.Add(encodeMemberState(full))
	f.Add(encodeLegacyMemberState(full))
	f.Add([]byte{memberStateVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
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
// never panics, and what decodes encodes back the same; so does the
// legacy assignment's (eddy-tasks').
func FuzzDecodeMemberAssignment(f *testing.F) {
	id := func(s int, p int32) processor.TaskID { return processor.TaskID{Subtopology: s, Partition: p} }
	f.Add(encodeMemberAssignment(nil, nil, false))
	f.Add(encodeMemberAssignment([]processor.TaskID{id(0, 0), id(0, 3), id(1, 3)}, []processor.TaskID{id(1, 3)}, true))
	f.Add(encodeLegacyMemberAssignment(map[string][]int32{"a": {0, 3}, "b-repartition": {3}}, map[string][]int32{"a": {3}}, true))
	f.Add([]byte{assignmentVersion, 1, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		legacy, lerr := decodeLegacyMemberAssignment(b, func(_ string, p int32) []processor.TaskID { return []processor.TaskID{id(0, p), id(1, p)} })
		got, err := decodeMemberAssignment(b)
		if err != nil {
			if lerr != nil || len(b) == 0 {
				return
			}
			got = legacy // re-encoded as version 3 below
		}
		if len(b) == 0 {
			return // no user data: nothing assigned beside the partitions
		}
		again, err := decodeMemberAssignment(encodeMemberAssignment(got.standby, got.warmup, got.followUp))
		if err != nil || fmt.Sprint(again) != fmt.Sprint(got) {
			t.Fatalf("% x decoded as %+v, which encodes to something that decodes as %+v (%v)", b, got, again, err)
		}
	})
}
