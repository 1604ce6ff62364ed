package kclient

import (
	"fmt"
	"testing"
)

// Tasks go to members in contiguous ranges, as librdkafka's range
// assignment placed partitions of equal-count topics: co-partitioned
// partitions on one member.
func TestAssignTasksInRanges(t *testing.T) {
	for _, tc := range []struct {
		members int
		topics  map[string]int32
		want    string
	}{
		{1, map[string]int32{"a": 4}, "[0 0 0 0]"},
		{2, map[string]int32{"a": 4, "b": 4}, "[0 0 1 1]"},
		{3, map[string]int32{"a": 4}, "[0 0 1 2]"},
		{2, map[string]int32{"a": 2, "b": 6}, "[0 0 0 1 1 1]"},
		{4, map[string]int32{"a": 2}, "[0 1]"},
		{0, map[string]int32{"a": 2}, "[]"},
	} {
		if got := fmt.Sprint(assignTasks(tc.members, tc.topics)); got != tc.want {
			t.Errorf("assignTasks(%d, %v) = %s, want %s", tc.members, tc.topics, got, tc.want)
		}
	}
}
