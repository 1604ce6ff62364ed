package engine

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/storage"
)

// departedLookAfter is how long a task waits for a transaction on its
// changelogs before the thread looks for whose it is (a previous owner
// that left cleanly committed, and its markers land within milliseconds);
// departedLookEvery spaces the looks; departedLookMax bounds one (its
// fence included: the coordinator aborts the transaction before it
// answers).
const (
	departedLookAfter = 250 * time.Millisecond
	departedLookEvery = time.Second
	departedLookMax   = 10 * time.Second
)

// departed ends the transactions that instances gone from the group left
// open on the changelogs of tasks the thread takes over. An instance that
// dies (SIGKILL, a lost host) leaves its transaction open, and the brokers
// abort it only once it has timed out and their next scan for timed-out
// transactions finds it (transaction.timeout.ms, then up to
// transaction.abort.timed.out.transaction.cleanup.interval.ms: 10 s and
// 10 s by default); until then the changelogs' last stable offset stops
// short of the task's committed state, and the task cannot start. Kafka
// Streams waits the same way. eddy finds the open transaction's
// transactional id (the producers of the changelog partitions), and if
// its process is no member of the group (a live instance's is: it revoked
// the task and committed, and its markers are on their way) claims the id
// with a new producer epoch: the coordinator aborts the transaction at
// once, and the departed producer, should it come back, can commit nothing
// more (its offsets were fenced by the group already, KIP-447). A look
// runs beside the thread, which goes on with its other tasks; the waiting
// tasks start when the changelogs are stable, as before.
type departed struct {
	cfg *Config
	log *zap.Logger

	mu sync.Mutex
	// running: a look is under way; last: when the last began.
	running bool
	last    time.Time
	// refused: a look was refused by the ACLs or the client (said once);
	// failed: a look failed otherwise (said at Info once, then at Debug).
	refused, failed bool
	// cancel ends the look under way (stop).
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// look starts a look at the changelogs of tasks that have waited at least
// departedLookAfter, unless one runs or ran within departedLookEvery.
func (d *departed) look(ctx context.Context, adm *lazyAdmin, tasks []*task) {
	if !d.cfg.ExactlyOnce {
		return
	}
	var tps []kclient.TP
	for _, tk := range tasks {
		if time.Since(tk.since) < departedLookAfter {
			continue
		}
		loggedStores(d.cfg, tk.id, func(tp kclient.TP, _ storage.Spec) { tps = append(tps, tp) })
	}
	if len(tps) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running || d.refused || time.Since(d.last) < departedLookEvery {
		return
	}
	a, err := adm.get()
	if err != nil {
		return
	}
	f, ok := a.(kclient.TxnFencer)
	if !ok {
		return // librdkafka's admin client
	}
	d.running, d.last = true, time.Now()
	ctx, d.cancel = context.WithTimeout(ctx, departedLookMax)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		err := d.fence(ctx, f, tps)
		d.mu.Lock()
		defer d.mu.Unlock()
		d.running = false
		switch {
		case err == nil || ctx.Err() != nil:
		case kclient.IsSecurity(err) && !d.refused:
			d.refused = true
			d.log.Warn("cannot end the open transactions of instances gone from the group (their tasks wait for the transactions to time out instead): grant DESCRIBE on the changelog topics and WRITE on the application's transactional ids", zap.Error(err))
		case !d.failed:
			d.failed = true
			d.log.Info("looking for the open transactions of instances gone from the group (their tasks wait for the transactions to time out if it keeps failing)", zap.Error(err))
		default:
			d.log.Debug("looking for the open transactions of instances gone from the group", zap.Error(err))
		}
	}()
}

// fence ends the open transactions on tps of processes not in the group.
func (d *departed) fence(ctx context.Context, f kclient.TxnFencer, tps []kclient.TP) error {
	ids, err := f.OpenTransactions(ctx, tps)
	if err != nil || len(ids) == 0 {
		return err
	}
	var theirs []string
	for _, id := range ids {
		if p, ok := d.process(id); ok && p != d.cfg.ProcessID {
			theirs = append(theirs, id)
		}
	}
	if len(theirs) == 0 {
		return nil
	}
	procs, ok, err := f.GroupProcesses(ctx, d.cfg.AppID)
	if err != nil || !ok {
		return err // a rebalance under way: the next look
	}
	for _, id := range theirs {
		if p, _ := d.process(id); procs[p] {
			continue // a member's: its transaction ends by itself
		}
		began := time.Now()
		if err := f.Fence(ctx, id); err != nil {
			return err
		}
		d.log.Info("ended the open transaction of an instance gone from the group, which held the changelogs of tasks taken over",
			zap.String("transactional_id", id), zap.Duration("took", time.Since(began)))
	}
	return nil
}

// process returns the process of one of the application's transactional
// ids (Thread.transactionalID: application id, process, thread index).
func (d *departed) process(transactionalID string) (string, bool) {
	rest, ok := strings.CutPrefix(transactionalID, d.cfg.AppID+"-")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 || i == len(rest)-1 || strings.Trim(rest[i+1:], "0123456789") != "" {
		return "", false
	}
	return rest[:i], true
}

// stop ends a look under way and waits for it (the session's clients
// close after it).
func (d *departed) stop() {
	d.mu.Lock()
	if d.cancel != nil {
		d.cancel()
	}
	d.mu.Unlock()
	d.wg.Wait()
}
