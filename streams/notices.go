package streams

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/backend"
)

// noticesTopic is where the instances' group members say they joined or
// left, so the others rejoin at once instead of at their next heartbeat
// (kclient.Notices).
func noticesTopic(appID string) string { return appID + "-eddy-rebalances" }

// startNotices creates the notice topic if needed and the instance's
// notice channel. Without one (a failure here) rebalances still happen,
// each member hearing of them at its next heartbeat: a warning, not an
// error.
func (a *App) startNotices(ctx context.Context, admin kclient.Admin) kclient.Notices {
	if backend.Name != "franz-go" {
		return nil // librdkafka's members neither send nor hear notices
	}
	topic := noticesTopic(a.cfg.ApplicationID)
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := admin.CreateTopics(tctx, []kclient.TopicSpec{{Name: topic, Partitions: 1, ReplicationFactor: a.cfg.ReplicationFactor,
		Config: map[string]string{"cleanup.policy": "delete", "retention.ms": "3600000", "segment.ms": "3600000"}}})
	cancel()
	if err != nil {
		a.log.Warn("rebalance notices: creating their topic; members will hear of rebalances at their next heartbeat only",
			zap.String("topic", topic), zap.Error(err))
		return nil
	}
	n, err := backend.NewNotices(a.clientConfig(a.noticesConfig()), topic, a.log)
	if err != nil {
		a.log.Warn("rebalance notices: creating their clients; members will hear of rebalances at their next heartbeat only",
			zap.String("topic", topic), zap.Error(err))
		return nil
	}
	return n
}
