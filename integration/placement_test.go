package integration_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// threadReport is what a worker's GET /state says of one stream thread.
type threadReport struct {
	Thread int `json:"thread"`
	Tasks  []struct {
		ID string `json:"id"`
	} `json:"tasks"`
	Counts struct {
		Processed int64 `json:"processed"`
	} `json:"counts"`
}

// threads reads a worker's stream threads from its admin endpoint.
func threads(t *testing.T, addr string) []threadReport {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/state")
	if err != nil {
		return nil // not serving yet
	}
	defer resp.Body.Close()
	var st struct {
		Threads []threadReport `json:"threads"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("GET /state of %s: %v", addr, err)
	}
	return st.Threads
}

// More instances than partitions: a word count has two sub-topologies (the
// words read from the input, repartitioned by word, and counted), so over
// 4 partitions it has 8 tasks, 0_0…0_3 and 1_0…1_3, placed independently
// as Kafka Streams places them. With 8 single-thread instances every
// instance runs one task and processes records; with 4 instances of 2
// threads, every thread does. (With a task that was a partition number
// over both sub-topologies, 4 of the 8 instances stayed idle.) The output
// stays exact.
func TestEveryInstanceWorksPastThePartitionCount(t *testing.T) {
	brokers := realBroker(t)
	for _, tc := range []struct{ instances, threads int }{{8, 1}, {4, 2}} {
		t.Run(fmt.Sprintf("%dx%d", tc.instances, tc.threads), func(t *testing.T) {
			a := newWordApp(t, brokers, 4)
			args := []string{"-guarantee", "exactly_once", "-cache=false", "-threads", fmt.Sprint(tc.threads)}
			var addrs []string
			var ws []*worker
			for i := range tc.instances {
				addr := freeAddr(t)
				addrs = append(addrs, addr)
				ws = append(ws, a.start(fmt.Sprintf("p%d", i), append(args, "-http", addr)...))
			}
			for _, w := range ws {
				w.waitRunning(t, 2*time.Minute)
			}
			a.feed(60_000, 3_000)
			// Every thread of every instance runs a task and has processed
			// records.
			deadline := time.Now().Add(3 * time.Minute)
			for {
				idle := []string{}
				for i, addr := range addrs {
					ths := threads(t, addr)
					if len(ths) != tc.threads {
						idle = append(idle, fmt.Sprintf("p%d (%d threads reported)", i, len(ths)))
						continue
					}
					for _, th := range ths {
						if len(th.Tasks) == 0 || th.Counts.Processed == 0 {
							idle = append(idle, fmt.Sprintf("p%d thread %d (%d tasks, %d records)", i, th.Thread, len(th.Tasks), th.Counts.Processed))
						}
					}
				}
				if len(idle) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("3m into the input, idle: %v", idle)
				}
				time.Sleep(200 * time.Millisecond)
			}
			for i, addr := range addrs {
				for _, th := range threads(t, addr) {
					var ids []string
					for _, tk := range th.Tasks {
						ids = append(ids, tk.ID)
					}
					t.Logf("p%d thread %d: tasks %v, %d records processed", i, th.Thread, ids, th.Counts.Processed)
				}
			}
			a.waitDone(5 * time.Minute)
			for _, w := range ws {
				w.stop(t)
			}
			a.checkExactSequences()
		})
	}
}
