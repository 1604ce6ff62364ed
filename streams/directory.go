package streams

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/backend"
	"github.com/eddy-go/eddy/internal/rt"
)

// The instance directory: each instance with an ApplicationServer writes,
// whenever its tasks change, a record to the compacted topic
// "<application id>-eddy-instances" (key: process id; value: its server and
// tasks; a tombstone when it stops cleanly), and every instance reads that
// topic, so each knows which instance has which task. Kafka Streams puts
// the same facts in its rebalance protocol's user data; eddy's group uses
// librdkafka's built-in assignors, so it keeps them in a topic instead.

// instanceInfo is one instance's directory record.
type instanceInfo struct {
	ProcessID string   `json:"process_id"`
	Server    string   `json:"server"`
	Tasks     []string `json:"tasks"`
	// Standbys are the tasks the instance follows as standbys (warm-ups
	// included).
	Standbys []string `json:"standbys,omitempty"`
	At       int64    `json:"at"` // when written, ms
}

type directory struct {
	mu   sync.Mutex
	byID map[string]instanceInfo
}

func directoryTopic(appID string) string { return appID + "-eddy-instances" }

// owner returns the instance that has task, by the latest record that
// lists it (a crashed instance's stale record loses to its successor's).
func (d *directory) owner(task string) (instanceInfo, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var best instanceInfo
	found := false
	for _, in := range d.byID {
		if slices.Contains(in.Tasks, task) && (!found || in.At > best.At) {
			best, found = in, true
		}
	}
	return best, found
}

// standbys returns the instances other than processID that follow task as
// a standby, by process id.
func (d *directory) standbys(task, processID string) []instanceInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []instanceInfo
	for _, in := range d.byID {
		if in.ProcessID != processID && slices.Contains(in.Standbys, task) {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b instanceInfo) int { return compareStrings(a.ProcessID, b.ProcessID) })
	return out
}

func (d *directory) all() []instanceInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]instanceInfo, 0, len(d.byID))
	for _, in := range d.byID {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b instanceInfo) int { return compareStrings(a.ProcessID, b.ProcessID) })
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// runDirectory reads the directory topic into d and, every 200ms, writes
// this instance's record when its tasks changed (and every 30s), until ctx
// ends; it then writes a tombstone so the others forget it at once.
func (a *App) runDirectory(ctx context.Context, d *directory, processID string) {
	topic := directoryTopic(a.cfg.ApplicationID)
	log := a.log.With(zap.String("topic", topic))
	prod, err := backend.NewProducer(a.clientConfig(a.directoryProducerConfig()))
	if err != nil {
		log.Error("instance directory: creating the producer; other instances will not find this one", zap.Error(err))
		return
	}
	defer prod.Close()
	cons, err := backend.NewConsumer(a.clientConfig(a.directoryConsumerConfig()))
	if err != nil {
		log.Error("instance directory: creating the consumer; queries will not be forwarded", zap.Error(err))
		return
	}
	defer cons.Close()
	if err := cons.Assign(map[kclient.TP]int64{{Topic: topic, Partition: 0}: 0}); err != nil {
		log.Error("instance directory: assigning its topic", zap.Error(err))
		return
	}
	var last, lastStandbys []string
	var lastAt time.Time
	publish := func(tasks, standbys []string, tombstone bool) {
		rec := &rt.OutRecord{Topic: topic, Partition: 0, Key: []byte(processID), Timestamp: time.Now().UnixMilli()}
		if !tombstone {
			rec.Value, _ = json.Marshal(instanceInfo{ProcessID: processID, Server: a.cfg.ApplicationServer, Tasks: tasks, Standbys: standbys, At: rec.Timestamp})
		}
		if err := prod.Produce(rec); err != nil {
			log.Warn("instance directory: writing this instance's record", zap.Error(err))
		}
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := prod.WaitDelivered(fctx); err != nil {
			log.Warn("instance directory: waiting for the record's delivery", zap.Error(err))
		}
		if err := prod.DeliveryErr(); err != nil {
			log.Warn("instance directory: writing this instance's record", zap.Error(err))
		}
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			publish(nil, nil, true)
			return
		case <-tick.C:
		}
		tasks, standbys := a.assignedTasks()
		if !slices.Equal(tasks, last) || !slices.Equal(standbys, lastStandbys) || time.Since(lastAt) > 30*time.Second {
			publish(tasks, standbys, false)
			last, lastStandbys, lastAt = tasks, standbys, time.Now()
		}
		for {
			r, err := cons.Poll(0)
			if err != nil {
				log.Debug("instance directory: reading", zap.Error(err))
				break
			}
			if r == nil {
				break
			}
			d.apply(r.Key, r.Value, log)
		}
	}
}

func (d *directory) apply(key, value []byte, log *zap.Logger) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if value == nil {
		delete(d.byID, string(key))
		return
	}
	var in instanceInfo
	if err := json.Unmarshal(value, &in); err != nil {
		log.Warn("instance directory: skipping a record that is not an instance's", zap.ByteString("key", key), zap.Error(err))
		return
	}
	d.byID[string(key)] = in
}

// assignedTasks lists the tasks this instance's threads have (restoring
// or not), and the tasks they follow as standbys, each sorted.
func (a *App) assignedTasks() (tasks, standbys []string) {
	a.mu.Lock()
	threads := a.threads
	a.mu.Unlock()
	for _, th := range threads {
		s := th.Snapshot()
		for _, tk := range s.Tasks {
			tasks = append(tasks, tk.ID)
		}
		for _, sb := range s.Standbys {
			standbys = append(standbys, sb.ID)
		}
	}
	slices.Sort(tasks)
	slices.Sort(standbys)
	return tasks, standbys
}
