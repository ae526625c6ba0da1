package router_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestShowTesseraSettingInEveryProtocol: SHOW tessera.* answers the
// setting's value in every query protocol: its default before the
// session SET it (a shard answering from its own session knew nothing
// of it and said ”), the value SET, the default again after RESET, and
// a SET followed by a SHOW in one pipeline.
func TestShowTesseraSettingInEveryProtocol(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	modes := []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec,
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec}
	show := func(conn *pgx.Conn, mode pgx.QueryExecMode, name, want string) {
		t.Helper()
		var v string
		if err := conn.QueryRow(ctx, "SHOW "+name, mode).Scan(&v); err != nil || v != want {
			t.Errorf("SHOW %s (mode %v) = %q, %v; want %q", name, mode, v, err, want)
		}
	}
	for _, mode := range modes {
		conn := connect(t, "store")
		show(conn, mode, "tessera.fanout", "scatter")
		show(conn, mode, "tessera.tx_mode", "multi")
		show(conn, mode, "tessera.gather", "on")
		mustExec(t, conn, "SET tessera.fanout = 'multi'")
		show(conn, mode, "tessera.fanout", "multi")
		mustExec(t, conn, "RESET tessera.fanout")
		show(conn, mode, "tessera.fanout", "scatter")

		var b pgx.Batch
		b.Queue("SET tessera.fanout = 'single'")
		var v string
		b.Queue("SHOW tessera.fanout").QueryRow(func(row pgx.Row) error { return row.Scan(&v) })
		if err := conn.SendBatch(ctx, &b).Close(); err != nil || v != "single" {
			t.Errorf("SET then SHOW in one pipeline: %q, %v; want single", v, err)
		}
		show(conn, mode, "tessera.fanout", "single")
		if _, err := conn.Exec(ctx, "SHOW tessera.no_such_setting", mode); sqlstate(err) != "42704" {
			t.Errorf("SHOW of an unknown tessera setting (mode %v): %v, want 42704", mode, err)
		}
	}
}
