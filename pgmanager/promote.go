package pgmanager

import (
	"context"
	"fmt"
	"time"
)

// Promote turns a running replica into a primary with
// pg_promote(wait => true), which returns once the server accepts writes
// on its new timeline. It then drops the standby settings from
// pgmanager's configuration, so nothing stale names the old primary, and
// waits until that is in effect. On a primary it only makes sure those
// settings are gone. Promotion does not
// set synchronous_standby_names or create slots for the other replicas:
// the caller does that (SetSynchronousStandbys; FollowPrimary and Rewind
// on the replicas create their slots).
func (i *Instance) Promote(ctx context.Context) error {
	if err := i.checkOpen(); err != nil {
		return err
	}
	c, err := i.localConn(ctx)
	if err != nil {
		return fmt.Errorf("pgmanager: Promote: %w", err)
	}
	defer c.Close(ctx)
	var inRecovery bool
	if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return fmt.Errorf("pgmanager: Promote: %w", err)
	}
	if inRecovery {
		wait := 60
		if d, ok := ctx.Deadline(); ok {
			wait = max(int(time.Until(d).Seconds()), 1)
		}
		var promoted bool
		if err := c.QueryRow(ctx, "SELECT pg_promote(true, $1)", wait).Scan(&promoted); err != nil {
			return fmt.Errorf("pgmanager: pg_promote: %w", err)
		}
		if !promoted {
			return fmt.Errorf("pgmanager: pg_promote: not promoted within %ds", wait)
		}
		i.log.Info("promoted to primary")
	}
	if err := i.removeStandbyConf(i.DataDir()); err != nil {
		return err
	}
	return reloadAndWait(ctx, c, "primary_conninfo", "")
}
