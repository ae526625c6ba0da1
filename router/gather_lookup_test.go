package router_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/topo/shardfunc"
)

// lookupKeys are customer ids of these tests' own, by the shard the store
// example places them on (customer_id_xxhash: below 0x80... on
// customer-shard-1).
func lookupKeys(t *testing.T) (one, two []int64) {
	t.Helper()
	for id := int64(7701000); id < 7701100; id++ {
		key, err := shardfunc.Func{Kind: shardfunc.XXHash}.KeyInt(id)
		if err != nil {
			t.Fatal(err)
		}
		if key < 1<<63 {
			one = append(one, id)
		} else {
			two = append(two, id)
		}
	}
	if len(one) < 5 || len(two) < 5 {
		t.Fatalf("ids by shard: %d and %d", len(one), len(two))
	}
	return one, two
}

// TestGatherBatchedLookup: a join of an unsharded table with customers
// on customers' shard key is gathered with a batched lookup (EXPLAIN
// (TESSERA) says so), pulls customers only from the shards owning the
// values (EXPLAIN (TESSERA, ANALYZE) lists the shards called), and
// answers as the rows say, in both protocols, NULLs and values no row
// has included.
func TestGatherBatchedLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, "store")
	one, two := lookupKeys(t)
	var values []string
	for _, id := range append(append([]int64(nil), one...), two...) {
		values = append(values, fmt.Sprintf("(%d, 'c%d')", id, id%5))
	}
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS lookup_refs (id int PRIMARY KEY, cid bigint)",
		"DELETE FROM lookup_refs",
		"DELETE FROM customers WHERE customer_id BETWEEN 7701000 AND 7701099",
		"INSERT INTO customers VALUES "+strings.Join(values, ", "),
		// Refs to three customers of customer-shard-1, one id no row
		// has (also on customer-shard-1's side of the range) and NULL.
		fmt.Sprintf("INSERT INTO lookup_refs VALUES (1, %d), (2, %d), (3, %d), (4, NULL), (5, 99999999999), (6, %d)", one[0], one[1], one[2], one[0]),
	)
	const join = "SELECT r.id, c.customer_id, c.name FROM lookup_refs r JOIN customers c ON c.customer_id = r.cid ORDER BY r.id"
	plan := explainLines(t, conn, "EXPLAIN (TESSERA) "+join)
	if !strings.Contains(plan, "Batched lookup") || !strings.Contains(plan, "customer_id = ANY(") {
		t.Fatalf("no batched lookup in the plan:\n%s", plan)
	}
	// 99999999999 hashes to one shard or the other; it only matters
	// that customer-shard-2 is called only if it owns that value.
	missing, _ := shardfunc.Func{Kind: shardfunc.XXHash}.KeyInt(99999999999)
	analyzed := explainLines(t, conn, "EXPLAIN (TESSERA, ANALYZE) "+join)
	if got := called(analyzed, "customer-shard-2"); got != (missing >= 1<<63) {
		t.Errorf("customer-shard-2 called: %v, owns a value: %v\n%s", got, missing >= 1<<63, analyzed)
	}
	if !called(analyzed, "customer-shard-1") {
		t.Errorf("customer-shard-1 not called:\n%s", analyzed)
	}
	want := []string{
		fmt.Sprintf("1 %d c%d", one[0], one[0]%5),
		fmt.Sprintf("2 %d c%d", one[1], one[1]%5),
		fmt.Sprintf("3 %d c%d", one[2], one[2]%5),
		fmt.Sprintf("6 %d c%d", one[0], one[0]%5),
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		if got := lookupRows(t, conn, join, mode); !slices.Equal(got, want) {
			t.Errorf("%v: got %q, want %q", mode, got, want)
		}
	}
	// The looked-up table on the nullable side: refs without a customer
	// are kept.
	left := "SELECT r.id, c.customer_id, c.name FROM lookup_refs r LEFT JOIN customers c ON c.customer_id = r.cid ORDER BY r.id"
	wantLeft := []string{want[0], want[1], want[2], "4 <nil> <nil>", "5 <nil> <nil>", want[3]}
	if got := lookupRows(t, conn, left, pgx.QueryExecModeSimpleProtocol); !slices.Equal(got, wantLeft) {
		t.Errorf("LEFT JOIN: got %q, want %q", got, wantLeft)
	}
	// A value on customer-shard-2 brings it into the pulls.
	mustExec(t, conn, fmt.Sprintf("INSERT INTO lookup_refs VALUES (7, %d)", two[0]))
	if analyzed := explainLines(t, conn, "EXPLAIN (TESSERA, ANALYZE) "+join); !called(analyzed, "customer-shard-2") {
		t.Errorf("customer-shard-2 not called for a value it owns:\n%s", analyzed)
	}
	want = append(want, fmt.Sprintf("7 %d c%d", two[0], two[0]%5))
	if got := lookupRows(t, conn, join, pgx.QueryExecModeCacheStatement); !slices.Equal(got, want) {
		t.Errorf("with a value on customer-shard-2: got %q, want %q", got, want)
	}
	// No value at all: no customer is pulled, no row answers.
	mustExec(t, conn, "DELETE FROM lookup_refs")
	if got := lookupRows(t, conn, join, pgx.QueryExecModeSimpleProtocol); len(got) != 0 {
		t.Errorf("no refs: got %q", got)
	}
	if _, err := conn.Exec(ctx, "DROP TABLE lookup_refs"); err != nil {
		t.Fatal(err)
	}
}

// called reports whether EXPLAIN (TESSERA, ANALYZE)'s figures list a
// call to shard.
func called(analyzed, shard string) bool {
	return regexp.MustCompile(`(?m)^  Shard ` + regexp.QuoteMeta(shard) + `: \d+ rows in `).MatchString(analyzed)
}

func explainLines(t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return strings.Join(lines, "\n")
}

func lookupRows(t *testing.T, conn *pgx.Conn, sql string, mode pgx.QueryExecMode) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql, mode)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var id int32
		var cid *int64
		var name *string
		if err := rows.Scan(&id, &cid, &name); err != nil {
			t.Fatal(err)
		}
		c, n := "<nil>", "<nil>"
		if cid != nil {
			c = fmt.Sprint(*cid)
		}
		if name != nil {
			n = *name
		}
		out = append(out, fmt.Sprintf("%d %s %s", id, c, n))
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}
