package planner

import (
	"slices"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// gatherSchema adds the columns of orders to the tests' schema.
type gatherSchema struct{ fakeSchema }

func (s gatherSchema) ColumnNames(db, schema, table string) ([]string, error) {
	if db+"."+schema+"."+table == "store.public.orders" {
		return []string{"order_id", "customer_id", "note", "total", "weight", "amount"}, nil
	}
	return s.fakeSchema.ColumnNames(db, schema, table)
}

func (s gatherSchema) ColumnType(db, schema, table, column string) (shardfunc.ColumnType, error) {
	if db+"."+schema+"."+table == "store.public.orders" && (column == "total" || column == "amount") {
		return shardfunc.Numeric, nil
	}
	return s.fakeSchema.ColumnType(db, schema, table, column)
}

// ColumnTypmod: orders.total is numeric(12,2), orders.amount an
// unconstrained numeric.
func (s gatherSchema) ColumnTypmod(db, schema, table, column string) (int32, error) {
	if db+"."+schema+"."+table == "store.public.orders" && column == "total" {
		return 12<<16 | 2 + 4, nil
	}
	return -1, nil
}

// Where Postgres keeps one of several equal values, a gather (reading the
// rows in another order) could show another: a numeric column of a fixed
// scale writes equal values alike and is gathered; an unconstrained one
// may hold 1.0 and 1.00 and keeps the refusal.
func TestGatherNeedsEqualValuesWrittenAlike(t *testing.T) {
	for _, c := range []struct {
		sql      string
		gathered bool
	}{
		{"SELECT DISTINCT o.total FROM orders o JOIN customers c ON o.note = c.name", true},
		{"SELECT o.total, count(*) FROM orders o JOIN customers c ON o.note = c.name GROUP BY o.total", true},
		{"SELECT DISTINCT o.amount FROM orders o JOIN customers c ON o.note = c.name", false},
		{"SELECT o.amount, count(*) FROM orders o JOIN customers c ON o.note = c.name GROUP BY 1", false},
		{"SELECT o.amount AS a, count(*) FROM orders o JOIN customers c ON o.note = c.name GROUP BY a", false},
		{"SELECT DISTINCT ON (1) o.amount, o.note FROM orders o JOIN customers c ON o.note = c.name ORDER BY 1, 2", false},
		{"SELECT o.total AS a, count(*) FROM orders o JOIN customers c ON o.note = c.name GROUP BY a", true},
		{"SELECT max(o.amount) FROM orders o JOIN customers c ON o.note = c.name", false},
		{"SELECT sum(o.amount) FROM orders o JOIN customers c ON o.note = c.name", true}, // a sum's scale is the inputs' greatest
		// A derived table's or CTE's column is followed to what defines it.
		{"SELECT x, count(*) FROM (SELECT o.amount AS x FROM orders o JOIN customers c ON o.note = c.name) s GROUP BY x", false},
		{"SELECT DISTINCT y FROM (SELECT o.amount FROM orders o JOIN customers c ON o.note = c.name) s (y)", false},
		{"WITH w (y) AS (SELECT o.amount + 1 FROM orders o JOIN customers c ON o.note = c.name) SELECT max(y) FROM w", false},
		{"SELECT z FROM (SELECT y AS z FROM (SELECT o.amount AS y FROM orders o JOIN customers c ON o.note = c.name) a) b GROUP BY z", false},
		{"SELECT x, count(*) FROM (SELECT o.total AS x FROM orders o JOIN customers c ON o.note = c.name) s GROUP BY x", true},
		{"WITH w (y) AS (SELECT o.total FROM orders o JOIN customers c ON o.note = c.name) SELECT max(y) FROM w", true},
		{"WITH RECURSIVE r (n) AS (SELECT o.total FROM orders o JOIN customers c ON o.note = c.name UNION ALL SELECT n + n FROM r WHERE n < 100) SELECT DISTINCT n FROM r", true},
		{"WITH RECURSIVE r (n) AS (SELECT o.amount FROM orders o JOIN customers c ON o.note = c.name UNION ALL SELECT n + n FROM r WHERE n < 100) SELECT DISTINCT n FROM r", false},
	} {
		st := planGathered(t, c.sql)
		if gathered := st.Err == nil && st.Route == Gathered; gathered != c.gathered {
			t.Errorf("%s: route %v, err %v; want gathered %v", c.sql, st.Route, st.Err, c.gathered)
		}
	}
}

func planGathered(t *testing.T, sql string) *Statement {
	t.Helper()
	xx := loadTopology(t, "store_xxhash.json")
	stmts, err := New(0).Plan(xx, 1, gatherSchema{testSchema}, Input{SQL: sql, Database: "store", SearchPath: []string{"public"}})
	if err != nil {
		t.Fatalf("%q: %v", sql, err)
	}
	return stmts[0]
}

// TestGatherPlans: what gathering answers instead of a refusal, with the
// columns and filters pushed to the shards, and the SQL the computing
// Postgres runs.
func TestGatherPlans(t *testing.T) {
	st := planGathered(t, "SELECT c.name, sum(o.total) FROM customers c JOIN orders o ON o.note = c.name WHERE c.customer_id > 10 AND o.total > 5 AND c.name <> o.note GROUP BY 1")
	if st.Err != nil || st.Route != Gathered || st.Gather == nil {
		t.Fatalf("route %v, err %v", st.Route, st.Err)
	}
	g := st.Gather
	want := []struct{ table, pull, create string }{
		{"store.public.customers", "SELECT c.customer_id, c.name FROM public.customers c WHERE c.customer_id > 10",
			"CREATE TEMP TABLE pg_temp.tessera_gather_1 ON COMMIT DROP AS SELECT customer_id, name FROM public.customers WITH NO DATA"},
		// Columns are matched by name, whatever table qualifies them:
		// c.customer_id pulls orders.customer_id too.
		{"store.public.orders", "SELECT o.customer_id, o.note, o.total FROM public.orders o WHERE o.total > 5",
			"CREATE TEMP TABLE pg_temp.tessera_gather_2 ON COMMIT DROP AS SELECT customer_id, note, total FROM public.orders WITH NO DATA"},
	}
	if len(g.Tables) != len(want) {
		t.Fatalf("tables %+v", g.Tables)
	}
	for i, w := range want {
		got := g.Tables[i]
		if got.Table.String() != w.table || got.Pull != w.pull || got.Create != w.create {
			t.Errorf("table %d:\n got %s | %s | %s\nwant %s | %s | %s", i, got.Table, got.Pull, got.Create, w.table, w.pull, w.create)
		}
	}
	if !strings.Contains(g.SQL, "FROM pg_temp.tessera_gather_1 c JOIN pg_temp.tessera_gather_2 o") || g.Compute != "shard-0" {
		t.Errorf("compute %s: %s", g.Compute, g.SQL)
	}
	if got := strings.Join(g.Shards(), ","); got != "shard-0,customer-shard-1,customer-shard-2" {
		t.Errorf("shards %s", got)
	}

	// A filter on an outer join's nullable side, or on a table named
	// twice, stays with the computing Postgres.
	st = planGathered(t, "SELECT c.name FROM customers c LEFT JOIN orders o ON o.note = c.name WHERE o.total IS NULL")
	if st.Route != Gathered || st.Gather.Tables[1].Pushed != 0 {
		t.Errorf("nullable side: %v %+v", st.Err, st.Gather)
	}
	st = planGathered(t, "SELECT a.name FROM customers a JOIN customers b ON a.name = b.name WHERE a.customer_id > 3")
	if st.Route != Gathered || len(st.Gather.Tables) != 1 || st.Gather.Tables[0].Pushed != 0 {
		t.Errorf("self join: %v %+v", st.Err, st.Gather)
	}

	// The literals are in the SQL: a statement of the same shape with
	// other values is planned afresh, not served another's plan.
	p := New(16)
	xx := loadTopology(t, "store_xxhash.json")
	for _, v := range []string{"11", "12"} {
		stmts, err := p.Plan(xx, 1, gatherSchema{testSchema}, Input{SQL: "SELECT count(*) FROM customers c JOIN orders o ON o.note = c.name WHERE c.customer_id > " + v, Database: "store", SearchPath: []string{"public"}})
		if err != nil || !strings.Contains(stmts[0].Gather.Tables[0].Pull, "> "+v) {
			t.Errorf("value %s: %v %+v", v, err, stmts[0].Gather)
		}
	}
}

// TestGatherKeepsRefusals: statements gathering would answer otherwise
// than one Postgres, that may write, or that are not the client's
// top-level SELECT keep their 0A000.
func TestGatherKeepsRefusals(t *testing.T) {
	for _, sql := range []string{
		"SELECT json_agg(name) FROM customers",                                    // input order
		"SELECT count(*) FROM (SELECT name FROM customers LIMIT 3) s",             // which rows
		"SELECT row_number() OVER (), name FROM customers ORDER BY name",          // input order
		"SELECT DISTINCT ON (name) customer_id FROM customers",                    // which row
		"SELECT sum(o.weight) FROM customers c JOIN orders o ON o.note = c.name",  // float order
		"SELECT name FROM customers ORDER BY name FOR UPDATE",                     // locks
		"SELECT nextval('s'), name FROM customers ORDER BY name",                  // sequences
		"SELECT my_func(name) FROM customers ORDER BY name",                       // may write
		"SELECT customers FROM customers ORDER BY name",                           // whole row
		"SELECT public.customers.name FROM customers ORDER BY name",               // three names
		"COPY (SELECT name FROM customers ORDER BY name) TO STDOUT",               // not a SELECT
		"EXPLAIN SELECT c.name FROM customers c JOIN orders o ON o.note = c.name", // shards explain
		"SELECT name FROM ONLY customers ORDER BY name",                           // inheritance
		"SELECT my_sum(customer_id) FROM customers",                               // user aggregate
	} {
		st := planGathered(t, sql)
		_, err := st.Shards(nil)
		if st.Route == Gathered || pgerr.Code(err) != pgerr.FeatureNotSupported {
			t.Errorf("%s: route %v, err %v; want 0A000", sql, st.Route, err)
		}
	}
	// tessera.gather = off refuses what gathering would answer.
	xx := loadTopology(t, "store_xxhash.json")
	stmts, _ := New(0).Plan(xx, 1, gatherSchema{testSchema}, Input{SQL: "SELECT name FROM customers ORDER BY name", Database: "store", SearchPath: []string{"public"}, NoGather: true})
	if pgerr.Code(stmts[0].Err) != pgerr.FeatureNotSupported {
		t.Errorf("NoGather: %v", stmts[0].Err)
	}
}

// TestGatherExactSums: sums over derived tables' columns are gathered
// when every definition of the column is exact (TPC-H's volume), and
// refused when one is not.
func TestGatherExactSums(t *testing.T) {
	for sql, gathered := range map[string]bool{
		"SELECT sum(v) FROM (SELECT o.total * (1 - o.total) AS v FROM customers c JOIN orders o ON o.note = c.name) s":                                       true,
		"SELECT sum(CASE WHEN name = 'x' THEN v ELSE 0 END) / sum(v) FROM (SELECT c.name, o.total AS v FROM customers c JOIN orders o ON o.note = c.name) s": true,
		"SELECT sum(v) FROM (SELECT o.weight AS v FROM customers c JOIN orders o ON o.note = c.name) s":                                                      false,
		"SELECT sum(v) FROM (SELECT o.total AS v FROM orders o UNION ALL SELECT o.weight FROM orders o JOIN customers c ON o.note = c.name) s":               false,
		"SELECT avg(total::float8) FROM customers c JOIN orders o ON o.note = c.name":                                                                        false,
		// An output named as the column it selects (TPC-H Q22's
		// c_acctbal), and one renamed by the derived table's aliases.
		"SELECT count(*), sum(total) FROM (SELECT o.total FROM customers c JOIN orders o ON o.note = c.name) s":           true,
		"SELECT sum(weight) FROM (SELECT o.weight FROM customers c JOIN orders o ON o.note = c.name) s":                   false,
		"SELECT sum(y) FROM (SELECT o.total FROM customers c JOIN orders o ON o.note = c.name) s (y)":                     true,
		"SELECT sum(y) FROM (SELECT o.weight FROM customers c JOIN orders o ON o.note = c.name) s (y)":                    false,
		"SELECT sum(x) FROM (SELECT x FROM (SELECT o.weight AS x FROM customers c JOIN orders o ON o.note = c.name) a) b": false,
	} {
		st := planGathered(t, sql)
		if got := st.Route == Gathered; got != gathered {
			t.Errorf("%s: gathered %v (err %v), want %v", sql, got, st.Err, gathered)
		}
	}
}

// The gathered tables are indexed on the columns the statement equates
// (a join's, a correlated subquery's, IN (SELECT ...)'s), and not the
// others (total).
func TestGatherIndexesEquatedColumns(t *testing.T) {
	st := planGathered(t, "SELECT c.name FROM customers c WHERE c.name IN (SELECT o.note FROM orders o WHERE o.order_id = c.customer_id AND o.total > 5)")
	if st.Err != nil || st.Gather == nil {
		t.Fatalf("route %v, err %v", st.Route, st.Err)
	}
	// The tables' order (and so their temporary names) follows the order
	// in which walk meets the RangeVars, which protobuf's Range leaves
	// undefined (it varies with the test binary): each index is checked
	// by its table's name.
	var got []string
	for _, tb := range st.Gather.Tables {
		for _, ix := range tb.Indexes {
			got = append(got, strings.Replace(ix, "pg_temp."+tb.Temp+" ", tb.Table.Table+" ", 1))
		}
	}
	slices.Sort(got)
	want := []string{
		`CREATE INDEX ON customers ("customer_id")`, `CREATE INDEX ON customers ("name")`,
		// Columns go by name, whatever table qualifies them (as pulled).
		`CREATE INDEX ON orders ("customer_id")`, `CREATE INDEX ON orders ("note")`, `CREATE INDEX ON orders ("order_id")`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("indexes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A table sharded by a key the statement equates with another table's
// column is looked up by that column's values (gather_lookup.go), only
// where dropping its rows that match no value cannot change the answer.
func TestGatherBatchedLookup(t *testing.T) {
	schema := lookupSchema{gatherSchema{testSchema}}
	xx := loadTopology(t, "store_xxhash.json")
	for _, c := range []struct {
		sql    string
		lookup bool
	}{
		{"SELECT c.name, o.note FROM orders o JOIN customers c ON c.customer_id = o.order_id WHERE o.note = 'x'", true},
		{"SELECT c.name FROM orders o JOIN customers c ON o.order_id = c.customer_id AND c.name <> o.note", true},
		{"SELECT c.name, o.note FROM orders o LEFT JOIN customers c ON c.customer_id = o.order_id", true},
		{"SELECT c.name, o.note FROM customers c RIGHT JOIN orders o ON c.customer_id = o.order_id", true},
		{"SELECT c.name, o.note FROM orders o, customers c WHERE c.customer_id = o.order_id", true},
		{"SELECT c.name, o.note FROM orders o LEFT JOIN customers c ON true WHERE c.customer_id = o.order_id", true},
		// The looked-up table on a preserved side keeps all its rows.
		{"SELECT c.name, o.note FROM customers c LEFT JOIN orders o ON c.customer_id = o.order_id", false},
		{"SELECT c.name, o.note FROM orders o RIGHT JOIN customers c ON c.customer_id = o.order_id", false},
		{"SELECT c.name, o.note FROM orders o FULL JOIN customers c ON c.customer_id = o.order_id", false},
		// Not a conjunct, not bare columns, not the key, types that do
		// not compare by their encodings.
		{"SELECT c.name FROM orders o JOIN customers c ON c.customer_id = o.order_id OR c.name = o.note", false},
		{"SELECT c.name FROM orders o JOIN customers c ON c.customer_id = o.order_id + 1", false},
		{"SELECT c.name FROM orders o JOIN customers c ON c.name = o.note", false},
		{"SELECT c.name FROM orders o JOIN customers c ON c.customer_id = o.total", false},
		// Read twice: its one temporary table serves both.
		{"SELECT c.name FROM orders o JOIN customers c ON c.customer_id = o.order_id WHERE EXISTS (SELECT 1 FROM customers c2 WHERE c2.name = o.note)", false},
		// In a subquery of the FROM, not the top-level one.
		{"SELECT s.name FROM orders o, (SELECT * FROM customers) s WHERE s.customer_id = o.order_id", false},
	} {
		stmts, err := New(0).Plan(xx, 1, schema, Input{SQL: c.sql, Database: "store", SearchPath: []string{"public"}})
		if err != nil {
			t.Fatalf("%q: %v", c.sql, err)
		}
		st := stmts[0]
		if st.Err != nil || st.Route != Gathered {
			t.Errorf("%s: route %v, err %v; want gathered", c.sql, st.Route, st.Err)
			continue
		}
		var lk *GatherLookup
		var lookedUp GatherTable
		for i, tb := range st.Gather.Tables {
			if tb.Lookup != nil {
				lk, lookedUp = tb.Lookup, tb
				if i == 0 {
					t.Errorf("%s: the looked-up table loads first", c.sql)
				}
			}
		}
		if (lk != nil) != c.lookup {
			t.Errorf("%s: lookup %v, want %v", c.sql, lk != nil, c.lookup)
			continue
		}
		if lk == nil {
			continue
		}
		if lookedUp.Table.Table != "customers" || lk.Key != "customer_id" || lk.KeyType != shardfunc.Int8 || lk.FromType != shardfunc.Int8 {
			t.Errorf("%s: lookup of %s by %s (%v from %v)", c.sql, lookedUp.Table, lk.Key, lk.KeyType, lk.FromType)
		}
		src := st.Gather.Tables[0]
		if lk.From != src.Temp || !strings.Contains(src.Pull, "order_id") {
			t.Errorf("%s: lookup from %s; the first table is %s pulling %s", c.sql, lk.From, src.Temp, src.Pull)
		}
		if !strings.HasSuffix(lk.Pull, "WHERE c.customer_id = ANY($1::bigint[])") {
			t.Errorf("%s: lookup pull %s", c.sql, lk.Pull)
		}
	}
}

// lookupSchema gives orders.order_id a type.
type lookupSchema struct{ gatherSchema }

func (s lookupSchema) ColumnType(db, schema, table, column string) (shardfunc.ColumnType, error) {
	if db+"."+schema+"."+table == "store.public.orders" && column == "order_id" {
		return shardfunc.Int8, nil
	}
	if db+"."+schema+"."+table == "store.public.orders" && column == "note" {
		return shardfunc.Text, nil
	}
	return s.gatherSchema.ColumnType(db, schema, table, column)
}
