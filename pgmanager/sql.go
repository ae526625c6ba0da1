package pgmanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// connect opens an administrative session. pgmanager's sessions are
// short-lived and run a handful of statements, so they use the simple
// protocol (no statement preparation round trips) and name themselves
// "pgmanager" in pg_stat_activity.
func connect(ctx context.Context, connString, password string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	if password != "" {
		cfg.Password = password
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.RuntimeParams["application_name"] = "pgmanager"
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// localConn connects to this instance over its unix socket.
func (i *Instance) localConn(ctx context.Context) (*pgx.Conn, error) {
	if !i.Running() {
		return nil, ErrNotRunning
	}
	c, err := connect(ctx, i.ConnConfig("postgres", "postgres"), "")
	if err != nil {
		return nil, fmt.Errorf("pgmanager: connecting to %s: %w", i.cfg.InstanceID, err)
	}
	return c, nil
}

// remoteConn connects to another instance (a primary) over TCP as the
// superuser. The password goes into the connection config, never into a
// string that could end up in a log.
func (i *Instance) remoteConn(ctx context.Context, e Endpoint) (*pgx.Conn, error) {
	c, err := connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", e.Host, e.Port),
		i.cfg.SuperuserPassword)
	if err != nil {
		return nil, fmt.Errorf("pgmanager: connecting to primary %s: %w", e, err)
	}
	return c, nil
}

// alterSystem runs ALTER SYSTEM SET name = value, or ALTER SYSTEM RESET
// name when value is nil, then reloads and waits until the setting reads
// want. A reload is asynchronous: the postmaster rereads the files, then
// signals every backend, ours included, which applies the change before
// its next statement. Once this session shows the new value, sessions
// started afterwards see it too.
func alterSystem(ctx context.Context, c *pgx.Conn, name string, value *string, want string) error {
	stmt := "ALTER SYSTEM RESET " + name
	if value != nil {
		stmt = "ALTER SYSTEM SET " + name + " = " + sqlLiteral(*value)
	}
	if _, err := c.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("pgmanager: %s: %w", stmt, err)
	}
	return reloadAndWait(ctx, c, name, want)
}

// reloadAndWait reloads the configuration and waits until this session
// shows name = want.
func reloadAndWait(ctx context.Context, c *pgx.Conn, name, want string) error {
	if _, err := c.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("pgmanager: pg_reload_conf: %w", err)
	}
	var got string
	for {
		if err := c.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			return fmt.Errorf("pgmanager: reading %s: %w", name, err)
		}
		if got == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgmanager: %s is %q, not %q, after the reload: %w", name, got, want, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sqlState returns err's SQLSTATE, "" if it has none.
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
