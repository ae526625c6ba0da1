package pgmanager

import (
	"context"
	"fmt"
	"strings"
)

// SetSynchronousStandbys sets synchronous_standby_names (ALTER SYSTEM, so
// it survives restarts) and reloads; "" clears it and commits stop
// waiting for standbys. names uses Postgres's syntax, e.g.
// "FIRST 1 (shard1_b, shard1_c)" or "ANY 1 (shard1_b, shard1_c)", and
// refers to replicas by application_name, which pgmanager sets to their
// InstanceID. It returns once the new value is in effect for new
// sessions.
func (i *Instance) SetSynchronousStandbys(ctx context.Context, names string) error {
	if strings.ContainsAny(names, "\x00\n\r") {
		return fmt.Errorf("pgmanager: SetSynchronousStandbys: %q contains a line break or NUL", names)
	}
	c, err := i.localConn(ctx)
	if err != nil {
		return fmt.Errorf("pgmanager: SetSynchronousStandbys: %w", err)
	}
	defer c.Close(ctx)
	var value *string
	if names != "" {
		value = &names
	}
	if err := alterSystem(ctx, c, "synchronous_standby_names", value, names); err != nil {
		return err
	}
	i.log.Info("synchronous standbys set", "names", names)
	return nil
}
