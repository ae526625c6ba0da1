package router_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/topo"
)

// TestExplainAnalyze: EXPLAIN (TESSERA, ANALYZE) runs the read it explains
// and reports, after the plan, the rows the statement gave and each
// shard's rows, checked against the shards themselves; the statement's
// rows never reach the client, its error does, and a write is refused
// without running.
func TestExplainAnalyze(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"DELETE FROM customers WHERE customer_id BETWEEN 7760000 AND 7760099")
	t.Cleanup(func() {
		mustExec(t, connect(t, "store"), "DELETE FROM customers WHERE customer_id BETWEEN 7760000 AND 7760099")
	})
	var values []string
	for i := range 30 {
		values = append(values, fmt.Sprintf("(%d, 'a%d')", 7760000+i, i%4))
	}
	mustExec(t, conn, "INSERT INTO customers VALUES "+strings.Join(values, ", "))

	explain := func(sql string) []string {
		t.Helper()
		rows, err := conn.Query(ctx, "EXPLAIN (TESSERA, ANALYZE) "+sql, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if fd := rows.FieldDescriptions(); len(fd) != 1 || fd[0].Name != "QUERY PLAN" {
			t.Fatalf("%s: columns %v", sql, fd)
		}
		return lines
	}
	shardLine := regexp.MustCompile(`^  Shard (\S+): (\d+) rows in [0-9.]+ ms \((\d+) calls\)$`)
	actual := regexp.MustCompile(`^Actual: (\d+) rows in [0-9.]+ ms$`)
	operatorLine := regexp.MustCompile(`^  (\S.*) -> (\d+) rows in [0-9.]+ ms$`)
	// check returns the rows of the router's operators, the root first.
	check := func(sql string, wantRows int, shardRows map[string]int) []int {
		t.Helper()
		lines := explain(sql)
		t.Logf("EXPLAIN (TESSERA, ANALYZE) %s:\n%s", sql, strings.Join(lines, "\n"))
		got, gotShards := -1, map[string]int{}
		var operators []int
		for _, l := range lines {
			if m := actual.FindStringSubmatch(l); m != nil {
				got, _ = strconv.Atoi(m[1])
			}
			if m := operatorLine.FindStringSubmatch(l); m != nil {
				n, _ := strconv.Atoi(m[2])
				operators = append(operators, n)
			}
			if m := shardLine.FindStringSubmatch(l); m != nil {
				n, _ := strconv.Atoi(m[2])
				gotShards[m[1]] += n
			}
		}
		if got != wantRows || fmt.Sprint(gotShards) != fmt.Sprint(shardRows) {
			t.Errorf("%s:\n%s\nwant %d rows, shards %v", sql, strings.Join(lines, "\n"), wantRows, shardRows)
		}
		if len(operators) > 0 {
			// The root gives the statement's rows; the bottom operator
			// reads what the shards answered.
			sum := 0
			for _, n := range shardRows {
				sum += n
			}
			if operators[0] != wantRows || operators[len(operators)-1] != sum {
				t.Errorf("%s: operators' rows %v, want %d at the root and %d at the bottom", sql, operators, wantRows, sum)
			}
		}
		return operators
	}
	onShard := func(shard, sql string) int {
		return int(count(t, direct(t, shard, "store"), sql))
	}
	const where = "customer_id BETWEEN 7760000 AND 7760099"
	// A scatter: each shard's rows, all of them the statement's.
	s1 := onShard("customer-shard-1", "SELECT count(*) FROM customers WHERE "+where)
	s2 := onShard("customer-shard-2", "SELECT count(*) FROM customers WHERE "+where)
	check("SELECT * FROM customers WHERE "+where, 30, map[string]int{"customer-shard-1": s1, "customer-shard-2": s2})
	// Merged: the shards' partial groups, the router's four.
	g1 := onShard("customer-shard-1", "SELECT count(DISTINCT name) FROM customers WHERE "+where)
	g2 := onShard("customer-shard-2", "SELECT count(DISTINCT name) FROM customers WHERE "+where)
	if ops := check("SELECT name, count(*) FROM customers WHERE "+where+" GROUP BY name ORDER BY name", 4, map[string]int{"customer-shard-1": g1, "customer-shard-2": g2}); len(ops) < 2 {
		t.Errorf("a merged GROUP BY shows %d operators of the router, want its merge and aggregate", len(ops))
	}
	// One shard by its key.
	check("SELECT * FROM customers WHERE customer_id = 7760003", 1, map[string]int{placedOn(t, 7760003): 1})

	// Its error is the client's; a write is refused and does not run.
	if _, err := conn.Exec(ctx, "EXPLAIN (TESSERA, ANALYZE) SELECT 1 / (customer_id - 7760005) FROM customers WHERE "+where, pgx.QueryExecModeSimpleProtocol); sqlstate(err) != "22012" {
		t.Errorf("a failing read: %v, want 22012", err)
	}
	if _, err := conn.Exec(ctx, "EXPLAIN (TESSERA, ANALYZE) DELETE FROM customers WHERE "+where, pgx.QueryExecModeSimpleProtocol); sqlstate(err) != "0A000" {
		t.Errorf("a write: %v, want 0A000", err)
	}
	if n := count(t, conn, "SELECT count(*) FROM customers WHERE "+where); n != 30 {
		t.Errorf("%d customers after the refused write, want 30", n)
	}
}

// placedOn is the shard a customer id routes to.
func placedOn(t *testing.T, id int64) string {
	t.Helper()
	snap, err := cluster.Store().GetTopology(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, shard, err := snap.Topology.Resolve("store", "public", "customers").RouteInt(id)
	if err != nil {
		t.Fatal(err)
	}
	return shard
}

// TestRouterAnswersInAStringOnOneShard: with one shard in the topology a
// string of statements goes to it whole, but EXPLAIN (TESSERA) and SHOW
// tessera.* in it are the router's to answer (Postgres refused the
// first with 42601 "unrecognized EXPLAIN option").
func TestRouterAnswersInAStringOnOneShard(t *testing.T) {
	ctx := context.Background()
	snap, err := cluster.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := snap.Topology
	one, err := topo.Parse([]byte(`{"authoritative_shard_group": "main",
		"shard_groups": [{"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { applyTopology(t, base) })
	applyTopology(t, one)
	conn := connect(t, "postgres")
	results, err := conn.PgConn().Exec(ctx, "SELECT 1; EXPLAIN (TESSERA) SELECT 2; SHOW tessera.fanout").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 3 || len(results[1].Rows) == 0 || !strings.HasPrefix(string(results[1].Rows[0][0]), "Statement: select") ||
		len(results[2].Rows) != 1 || string(results[2].Rows[0][0]) != "scatter" {
		t.Fatalf("results %+v", results)
	}
}
