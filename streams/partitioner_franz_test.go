//go:build !eddy_librdkafka

package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// A store fed through a repartition with a stream partitioner is queried
// where the partitioner put each key: MetadataForKey names the partition
// the key's records were written to (not murmur2's), and the query there
// finds it.
func TestQueriesFindKeysWhereTheStreamPartitionerPutThem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	keys := []string{"a1", "b1", "c1", "d1", "c2", "a2"}
	for _, k := range keys {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "in", Key: []byte(k), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	byLetter := func(_ string, key string, _ *string, n int32) ([]int32, bool) {
		return []int32{int32(key[0]-'a') % n}, true
	}
	str := serde.String()
	b := topology.NewBuilder()
	placed := topology.Stream(b, "in", topology.Consumed(str, str)).
		Repartition(topology.Repartitioned(str, str).WithName("placed").WithStreamPartitioner(byLetter))
	topology.Count(placed.GroupByKey(), topology.Materialized[string, int64]("counts"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	app, err := streams.New(top, streams.Config{ApplicationID: "placed-app", BootstrapServers: brokers, StateDir: t.TempDir(), CommitInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	defer func() {
		app.Close(context.Background())
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	store, err := streams.KeyValueStoreOf[string, int64](app, "counts")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every key counted", func() bool {
		for _, k := range keys {
			if n, ok, err := store.Get(k); err != nil || !ok || n != 1 {
				return false
			}
		}
		return true
	})
	// Where the records went: the repartition topic's partitions, as far
	// as their tasks processed them (the topic itself is purged).
	want := map[int32]int64{}
	for _, k := range keys {
		want[int32(k[0]-'a')]++
	}
	waitFor(t, "the repartition records processed where the partitioner put them", func() bool {
		got := map[int32]int64{}
		for _, th := range app.Report().Threads {
			for _, tk := range th.Tasks {
				for _, p := range tk.Partitions {
					if p.Topic == "placed-app-placed-repartition" && p.Position > 0 {
						got[p.Partition] = p.Position
					}
				}
			}
		}
		return len(got) == len(want) && got[0] == want[0] && got[1] == want[1] && got[2] == want[2] && got[3] == want[3]
	})
	differs := false
	for _, k := range keys {
		md, err := app.MetadataForKey("counts", k)
		if err != nil {
			t.Fatal(err)
		}
		if md.Partition != int32(k[0]-'a') || !md.Local {
			t.Errorf("key %s: metadata %+v, its records in partition %d", k, md, k[0]-'a')
		}
		differs = differs || kclient.KeyPartition([]byte(k), 4) != md.Partition
	}
	if !differs {
		t.Error("every key's partition is murmur2's too: the test proves nothing")
	}
}
