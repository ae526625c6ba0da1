package planner

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/router/engine"
)

// TestCountsMerge: a SELECT of counts over several shards is planned as a
// scalar aggregate of sums of counts; other reads are not.
func TestCountsMerge(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(0)
	counts := func(n int) *engine.Plan {
		cols := make([]engine.AggColumn, n)
		for i := range cols {
			cols[i] = engine.AggColumn{Func: engine.SumCounts, Type: engine.Int}
		}
		return &engine.Plan{Aggregate: cols, Scalar: true, Limit: -1}
	}
	for sql, want := range map[string]*engine.Plan{
		"SELECT count(*) FROM customers":                                           counts(1),
		"SELECT count(*), count(name) FROM customers WHERE customer_id IN (1, 42)": counts(2),
		"SELECT pg_catalog.count(*) FROM customers":                                counts(1),
		// One shard answers alone; Merge says what to do if several did.
		"SELECT count(*) FROM customers WHERE customer_id = 42": counts(1),
		"SELECT * FROM customers":                               nil,
		"EXPLAIN SELECT count(*) FROM customers":                nil,
	} {
		st := planOne(t, p, xx, store(sql))
		if st.Err != nil || !reflect.DeepEqual(st.Engine, want) {
			t.Errorf("%s: merge %v plan %+v, err %v; want %+v", sql, st.Merge, st.Engine, st.Err, want)
		}
	}
	if st := planOne(t, p, xx, store("SELECT * FROM customers LIMIT 7")); st.Merge != MergeLimit {
		t.Errorf("LIMIT alone: merge %v", st.Merge)
	}
	// The limit is the statement's own, even when a plan of the same
	// shape was cached with another.
	p = New(100)
	for sql, want := range map[string]Limit{
		"SELECT * FROM customers LIMIT 7":                                  {Value: 7},
		"SELECT * FROM customers LIMIT 9":                                  {Value: 9},
		"SELECT * FROM customers LIMIT $1":                                 {Param: 1},
		"SELECT * FROM customers WHERE name = $1 FETCH FIRST $2 ROWS ONLY": {Param: 2},
	} {
		if st := planOne(t, p, xx, store(sql)); st.Merge != MergeLimit || st.Limit != want {
			t.Errorf("%s: merge %v, limit %+v; want %+v", sql, st.Merge, st.Limit, want)
		}
	}
}

// TestOrderedMerge: ORDER BY integer output columns with a LIMIT is
// planned for a k-way merge, with each key's column, direction and NULLs.
func TestOrderedMerge(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(100)
	key := func(col int, desc, nullsFirst bool) engine.SortKey {
		return engine.SortKey{Column: col, Type: engine.Int, Desc: desc, NullsFirst: nullsFirst}
	}
	for sql, want := range map[string][]engine.SortKey{
		"SELECT * FROM customers ORDER BY customer_id LIMIT 5":                                  {key(0, false, false)},
		"SELECT name, customer_id FROM customers ORDER BY customer_id DESC LIMIT 5":             {key(1, true, true)},
		"SELECT name, customer_id AS id FROM customers ORDER BY id NULLS FIRST LIMIT 5":         {key(1, false, true)},
		"SELECT c.* FROM customers c ORDER BY 1 DESC NULLS LAST LIMIT 5":                        {key(0, true, false)},
		"SELECT customer_id, name FROM customers WHERE name > 'a' ORDER BY customer_id LIMIT 0": {key(0, false, false)},
		"SELECT customer_id, age FROM customers ORDER BY age, 1 DESC LIMIT 5":                   {key(1, false, false), key(0, true, true)},
		// A qualified name is the table's column, not the output named
		// like it (found by the differential harness).
		"SELECT customer_id + 1 AS customer_id, customer_id FROM customers ORDER BY customers.customer_id LIMIT 5": {key(1, false, false)},
		"SELECT customer_id AS id FROM customers c ORDER BY c.customer_id LIMIT 5":                                 {key(0, false, false)},
	} {
		st := planOne(t, p, xx, store(sql))
		if st.Err != nil || st.Merge != MergeEngine || !reflect.DeepEqual(st.Engine.Merge, want) || st.Engine.Aggregate != nil {
			t.Errorf("%s: merge %v plan %+v err %v; want keys %+v", sql, st.Merge, st.Engine, st.Err, want)
		}
	}
	for _, sql := range []string{
		"SELECT customer_id FROM customers c ORDER BY other.customer_id LIMIT 5",
		"SELECT name FROM customers ORDER BY name LIMIT 5", // text order is the collation's
		"SELECT customer_id FROM customers ORDER BY customer_id LIMIT 5 OFFSET $1",
	} {
		if st := planOne(t, p, xx, store(sql)); st.Merge == MergeEngine {
			t.Errorf("%s: merged by %+v, but the key is not an orderable output column", sql, st.Engine)
		}
	}
	for sql, want := range map[string]int64{
		"SELECT * FROM customers ORDER BY customer_id LIMIT 5": 5,
		"SELECT * FROM customers ORDER BY customer_id LIMIT 8": 8,
	} {
		if st := planOne(t, p, xx, store(sql)); st.Engine == nil || st.Engine.Limit != want {
			t.Errorf("%s: plan %+v, want limit %d", sql, st.Engine, want)
		}
	}
}

// TestAggregateMerge: GROUP BY, DISTINCT and the aggregates whose partials
// the engine finishes are planned with Postgres's result types; anything
// the shards' answers cannot finish exactly is refused (0A000).
func TestAggregateMerge(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(100)
	col := func(f engine.AggFunc, typ engine.Type) engine.AggColumn { return engine.AggColumn{Func: f, Type: typ} }
	key := engine.AggColumn{Func: engine.GroupKey, Type: engine.Opaque}
	for sql, want := range map[string]*engine.Plan{
		"SELECT name, count(*), sum(age), min(age), max(customer_id) FROM customers GROUP BY name": {
			Aggregate: []engine.AggColumn{key, col(engine.SumCounts, engine.Int), col(engine.SumInt8, engine.Int), col(engine.Min, engine.Int), col(engine.Max, engine.Int)}, Limit: -1},
		"SELECT sum(customer_id), sum(balance), bool_and(vip), every(vip), bool_or(age > 3) FROM customers": {
			Aggregate: []engine.AggColumn{col(engine.SumNumeric, engine.Numeric), col(engine.SumNumeric, engine.Numeric), col(engine.BoolAnd, engine.Bool), col(engine.BoolAnd, engine.Bool), col(engine.BoolOr, engine.Bool)}, Scalar: true, Limit: -1},
		"SELECT age AS a, count(*) AS n FROM customers GROUP BY 1 ORDER BY n DESC, a": {
			Aggregate: []engine.AggColumn{{Func: engine.GroupKey, Type: engine.Int}, col(engine.SumCounts, engine.Int)},
			Sort:      []engine.SortKey{{Column: 1, Type: engine.Int, Desc: true, NullsFirst: true}, {Column: 0, Type: engine.Int}}, Limit: -1},
		"SELECT count(*), 'x' AS tag FROM customers": {Aggregate: []engine.AggColumn{col(engine.SumCounts, engine.Int), key}, Scalar: true, Limit: -1},
		"SELECT DISTINCT name, vip FROM customers":   {Aggregate: []engine.AggColumn{key, {Func: engine.GroupKey, Type: engine.Bool}}, Limit: -1},
		"SELECT name, count(*) FROM customers GROUP BY name ORDER BY count(*) DESC": {
			Aggregate: []engine.AggColumn{key, col(engine.SumCounts, engine.Int)},
			Sort:      []engine.SortKey{{Column: 1, Type: engine.Int, Desc: true, NullsFirst: true}}, Limit: -1},
	} {
		st := planOne(t, p, xx, store(sql))
		if st.Err != nil || st.Merge != MergeEngine || !reflect.DeepEqual(st.Engine, want) {
			t.Errorf("%s: merge %v plan %+v err %v; want %+v", sql, st.Merge, st.Engine, st.Err, want)
		}
	}
	for _, sql := range []string{
		"SELECT name, count(*) FROM customers GROUP BY name LIMIT $1", // the engine reads literal limits only
		"SELECT name, count(*) FROM customers GROUP BY name HAVING count(*) > 1 OR count(*) < 0",
		"SELECT name, sum(balance) FROM customers GROUP BY name HAVING sum(balance) > 1",
		"SELECT name FROM customers GROUP BY name HAVING name > 'a'",
		"SELECT sum(age) + 1 FROM customers",                              // an aggregate inside an expression
		"SELECT min(name) FROM customers",                                 // text order is the collation's
		"SELECT count(DISTINCT name), count(DISTINCT age) FROM customers", // two DISTINCT groupings
		"SELECT count(DISTINCT balance) FROM customers",                   // numeric: 1.0 = 1.00
		"SELECT name, count(*) FROM customers GROUP BY name ORDER BY count(DISTINCT age)",
		"SELECT name, count(*) FROM customers GROUP BY name HAVING avg(age) > 1",
		"SELECT avg(age) + 1 FROM customers",
		"SELECT count(*) FROM customers GROUP BY balance",          // a hidden numeric key
		"SELECT balance, count(*) FROM customers GROUP BY balance", // numeric: 1.0 = 1.00
		"SELECT DISTINCT balance FROM customers",
		"SELECT DISTINCT ON (name) name FROM customers",
		"SELECT name, count(*) FROM customers GROUP BY ROLLUP (name)",
		"SELECT count(*) FROM customers WHERE age IN (SELECT max(age) FROM customers)",
	} {
		if st := planOne(t, p, xx, store(sql)); st.Merge == MergeEngine || st.Err == nil {
			t.Errorf("%s: planned %+v, err %v; want 0A000", sql, st.Engine, st.Err)
		}
	}
}

// TestExplainEngine: EXPLAIN (TESSERA) shows the operator tree over the
// SQL each shard runs.
func TestExplainEngine(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	st := planOne(t, New(0), xx, store("EXPLAIN (TESSERA) SELECT name, count(*) FROM customers GROUP BY name ORDER BY 2 DESC"))
	got := strings.Join(st.Describe(nil), "\n")
	want := `Statement: select
Route: scatter (group customer_data)
Tables: store.public.customers
Sort by $2 DESC
  Aggregate by group: $1 key, $2 sum(count)
    Concat
      Shard customer-shard-1: SELECT name, count(*) FROM customers GROUP BY name ORDER BY 2 DESC
      Shard customer-shard-2: SELECT name, count(*) FROM customers GROUP BY name ORDER BY 2 DESC`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// TestShardSQL: a LIMIT or OFFSET the router applies after merging is
// taken from the SQL the shards run (or widened to limit + offset).
func TestShardSQL(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(100)
	for sql, want := range map[string]string{
		"SELECT name, count(*) FROM customers GROUP BY name LIMIT 3":             "SELECT name, count(*) FROM customers GROUP BY name",
		"SELECT name, count(*) FROM customers GROUP BY name ORDER BY 2 OFFSET 1": "SELECT name, count(*) FROM customers GROUP BY name",
		"SELECT DISTINCT name FROM customers LIMIT 2":                            "SELECT DISTINCT name FROM customers",
		"SELECT customer_id FROM customers ORDER BY 1 LIMIT 5 OFFSET 2":          "SELECT customer_id FROM customers ORDER BY 1 LIMIT 7",
		"SELECT customer_id FROM customers ORDER BY 1 OFFSET 2":                  "SELECT customer_id FROM customers ORDER BY 1",
		"SELECT customer_id FROM customers ORDER BY 1 LIMIT 5":                   "",
		"SELECT name, count(*) FROM customers GROUP BY name HAVING count(*) > 1": "SELECT name, count(*) FROM customers GROUP BY name",
	} {
		st := planOne(t, p, xx, store(sql))
		if st.Err != nil || st.Engine == nil || st.Engine.ShardSQL != want {
			t.Errorf("%s: plan %+v err %v; want shard SQL %q", sql, st.Engine, st.Err, want)
		}
	}
}

// TestHaving: a HAVING over the outputs' integer aggregates becomes a
// filter the router applies to the final rows.
func TestHaving(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(100)
	for sql, want := range map[string][]engine.Condition{
		"SELECT name, count(*) FROM customers GROUP BY name HAVING count(*) > 1":                               {{Column: 1, Op: ">", Value: 1}},
		"SELECT name, count(*), max(age) FROM customers GROUP BY name HAVING 3 <= max( age) AND count(*) <> 2": {{Column: 2, Op: ">=", Value: 3}, {Column: 1, Op: "<>", Value: 2}},
		"SELECT count(*) FROM customers HAVING count(*) = 0":                                                   {{Column: 0, Op: "=", Value: 0}},
	} {
		st := planOne(t, p, xx, store(sql))
		if st.Err != nil || st.Engine == nil || !reflect.DeepEqual(st.Engine.Having, want) {
			t.Errorf("%s: plan %+v err %v; want having %+v", sql, st.Engine, st.Err, want)
		}
	}
}

// TestEnginePlanCachedByText: a plan holds literals of its text (ORDER BY
// and GROUP BY positions, HAVING's constants, the shards' SQL), so two
// statements of one shape get plans of their own.
func TestEnginePlanCachedByText(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(100)
	a := planOne(t, p, xx, store("SELECT customer_id, age FROM customers ORDER BY 1"))
	b := planOne(t, p, xx, store("SELECT customer_id, age FROM customers ORDER BY 2"))
	if a.Engine == nil || b.Engine == nil || a.Engine.Merge[0].Column != 0 || b.Engine.Merge[0].Column != 1 {
		t.Errorf("ORDER BY 1, then 2: %+v, %+v", a.Engine, b.Engine)
	}
	c := planOne(t, p, xx, store("SELECT name, count(*) FROM customers WHERE age > 1 GROUP BY name HAVING count(*) > 2"))
	d := planOne(t, p, xx, store("SELECT name, count(*) FROM customers WHERE age > 5 GROUP BY name HAVING count(*) > 7"))
	if c.Engine == nil || d.Engine == nil || d.Engine.Having[0].Value != 7 || !strings.Contains(d.Engine.ShardSQL, "age > 5") {
		t.Errorf("HAVING with other literals: %+v, then %+v", c.Engine, d.Engine)
	}
}

// A join the shards answer whole (customers and orders colocated on
// customer_id) is merged as one table's rows when every column name it
// uses stands for one table's column; otherwise it is left to gathering.
func TestMergeColocatedJoin(t *testing.T) {
	schema := lookupSchema{gatherSchema{testSchema}}
	xx := loadTopology(t, "store_xxhash.json")
	const join = " FROM customers c JOIN orders o ON o.customer_id = c.customer_id"
	for _, c := range []struct {
		sql      string
		engine   bool
		shardSQL string // a part of the shards' SQL, when engine
	}{
		{"SELECT o.note, count(*), sum(o.order_id)" + join + " GROUP BY o.note", true, "GROUP BY o.note"},
		{"SELECT c.customer_id, count(*)" + join + " GROUP BY c.customer_id ORDER BY c.customer_id LIMIT 3", true, "GROUP BY c.customer_id"},
		{"SELECT note, avg(order_id)" + join + " GROUP BY note", true, "pg_catalog.sum(order_id)"},
		{"SELECT o.note" + join + " ORDER BY c.customer_id LIMIT 3", true, "SELECT o.note, c.customer_id FROM"},
		{"SELECT o.order_id" + join + " ORDER BY 1 LIMIT 3", true, "LIMIT 3"},
		{"SELECT count(DISTINCT o.order_id)" + join, true, "GROUP BY o.order_id"},
		// One name for two tables' columns: not one column to the engine.
		{"SELECT c.customer_id, o.customer_id, count(*)" + join + " GROUP BY c.customer_id, o.customer_id", false, ""},
		{"SELECT o.customer_id, count(*)" + join + " GROUP BY o.customer_id ORDER BY c.customer_id", false, ""},
		{"SELECT customer_id, count(*)" + join + " GROUP BY customer_id", false, ""},
		{"SELECT *" + join + " ORDER BY c.customer_id LIMIT 3", false, ""},
	} {
		stmts, err := New(0).Plan(xx, 1, schema, Input{SQL: c.sql, Database: "store", SearchPath: []string{"public"}})
		if err != nil {
			t.Fatalf("%q: %v", c.sql, err)
		}
		st := stmts[0]
		if got := st.Err == nil && st.Merge == MergeEngine; got != c.engine {
			t.Errorf("%s: engine %v (route %v, err %v), want %v", c.sql, got, st.Route, st.Err, c.engine)
			continue
		}
		if !c.engine {
			continue
		}
		shardSQL := st.Engine.ShardSQL
		if shardSQL == "" {
			shardSQL = c.sql // the shards run the statement as written
		}
		if !strings.Contains(shardSQL, c.shardSQL) {
			t.Errorf("%s: shards run %s, want it to hold %q", c.sql, st.Engine.ShardSQL, c.shardSQL)
		}
	}
}
