package pgmanager

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// promotePoll is how often Promote looks whether the promotion is done.
// pg_promote(wait => true) looks only every 100 ms, and a promotion takes
// a few tens of milliseconds here, so waiting on Postgres's own loop
// added up to 100 ms to every switchover's pause, during which routers
// hold the shard's statements.
const promotePoll = 5 * time.Millisecond

// Promote turns a running replica into a primary: pg_promote(wait =>
// false) signals the startup process, and Promote returns once the server
// has left recovery, that is once it accepts writes on its new timeline.
// It then drops the standby settings from pgmanager's configuration, so
// nothing stale names the old primary, and waits until that is in
// effect. On a primary it only makes sure those settings are gone.
// Promotion does not set synchronous_standby_names or create slots for
// the other replicas: the caller does that (SetSynchronousStandbys;
// FollowPrimary and Rewind on the replicas create their slots).
func (i *Instance) Promote(ctx context.Context) error {
	if err := i.checkOpen(); err != nil {
		return err
	}
	c, err := i.localConn(ctx)
	if err != nil {
		return fmt.Errorf("pgmanager: Promote: %w", err)
	}
	defer c.Close(ctx)
	inRecovery, err := isInRecovery(ctx, c)
	if err != nil {
		return fmt.Errorf("pgmanager: Promote: %w", err)
	}
	if inRecovery {
		// Signalling twice (a retried Promote) is harmless: the startup
		// process promotes once.
		var signalled bool
		if err := c.QueryRow(ctx, "SELECT pg_promote(false)").Scan(&signalled); err != nil {
			return fmt.Errorf("pgmanager: pg_promote: %w", err)
		}
		if !signalled {
			return fmt.Errorf("pgmanager: pg_promote: the startup process could not be signalled")
		}
		for inRecovery {
			select {
			case <-ctx.Done():
				return fmt.Errorf("pgmanager: Promote: still in recovery: %w", ctx.Err())
			case <-time.After(promotePoll):
			}
			if inRecovery, err = isInRecovery(ctx, c); err != nil {
				return fmt.Errorf("pgmanager: Promote: %w", err)
			}
		}
		i.log.Info("promoted to primary")
	}
	if err := i.removeStandbyConf(i.DataDir()); err != nil {
		return err
	}
	return reloadAndWait(ctx, c, "primary_conninfo", "")
}

func isInRecovery(ctx context.Context, c *pgx.Conn) (bool, error) {
	var in bool
	err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&in)
	return in, err
}
