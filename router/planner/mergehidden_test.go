package planner

import (
	"reflect"
	"testing"

	"github.com/tesseradb/tessera/router/engine"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// TestHiddenColumnPlans: what the statement does not show but the router
// needs (an avg's sum and count, count(DISTINCT x)'s x, a group or sort
// key, an aggregate in HAVING or ORDER BY) is appended to the shards'
// SELECT as hidden columns, which the plan aggregates and then drops.
func TestHiddenColumnPlans(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(100)
	col := func(f engine.AggFunc, typ engine.Type) engine.AggColumn { return engine.AggColumn{Func: f, Type: typ} }
	key := func(typ engine.Type) engine.AggColumn { return engine.AggColumn{Func: engine.GroupKey, Type: typ} }
	count, sumNum := col(engine.SumCounts, engine.Int), col(engine.SumNumeric, engine.Numeric)
	for sql, want := range map[string]*engine.Plan{
		"SELECT avg(age) FROM customers": {
			Aggregate: []engine.AggColumn{{Func: engine.Avg, Type: engine.Numeric, Sum: 1, Count: 2}, sumNum, count},
			Scalar:    true, Limit: -1, Hidden: 2, Visible: 1,
			ShardSQL: "SELECT avg(age), pg_catalog.sum(age), pg_catalog.count(age) FROM customers"},
		"SELECT name, avg(balance) FILTER (WHERE vip) FROM customers GROUP BY name": {
			Aggregate: []engine.AggColumn{key(engine.Opaque), {Func: engine.Avg, Type: engine.Numeric, Sum: 2, Count: 3}, sumNum, count},
			Limit:     -1, Hidden: 2, Visible: 2,
			ShardSQL: "SELECT name, avg(balance) FILTER (WHERE vip), pg_catalog.sum(balance) FILTER (WHERE vip), pg_catalog.count(balance) FILTER (WHERE vip) FROM customers GROUP BY name"},
		"SELECT count(*) FROM customers GROUP BY name": {
			Aggregate: []engine.AggColumn{count, key(engine.Opaque)},
			Limit:     -1, Hidden: 1, Visible: 1,
			ShardSQL: "SELECT count(*), name FROM customers GROUP BY name"},
		"SELECT name, count(DISTINCT age), sum(DISTINCT age), count(*) FROM customers GROUP BY name": {
			PreAggregate: []engine.AggColumn{key(engine.Opaque), col(engine.Max, engine.Int), col(engine.Any, 0), count, key(0)},
			Aggregate:    []engine.AggColumn{key(engine.Opaque), {Func: engine.SumCounts, Type: engine.Int}, col(engine.SumInt8, engine.Int), count, col(engine.Any, 0)},
			Limit:        -1, Hidden: 1, Visible: 4,
			ShardSQL: "SELECT name, count(DISTINCT age), sum(DISTINCT age), count(*), age FROM customers GROUP BY name, age"},
		"SELECT count(DISTINCT customer_id) FROM customers": {
			PreAggregate: []engine.AggColumn{col(engine.Max, engine.Int), key(0)},
			Aggregate:    []engine.AggColumn{count, col(engine.Any, 0)},
			Scalar:       true, Limit: -1, Hidden: 1, Visible: 1,
			ShardSQL: "SELECT count(DISTINCT customer_id), customer_id FROM customers GROUP BY customer_id"},
		"SELECT name FROM customers GROUP BY name HAVING count(*) > 1 ORDER BY max(age) DESC LIMIT 2": {
			Aggregate: []engine.AggColumn{key(engine.Opaque), count, col(engine.Max, engine.Int)},
			Having:    []engine.Condition{{Column: 1, Op: ">", Value: 1}},
			Sort:      []engine.SortKey{{Column: 2, Type: engine.Int, Desc: true, NullsFirst: true}},
			Limit:     2, Hidden: 2, Visible: 1,
			ShardSQL: "SELECT name, count(*), max(age) FROM customers GROUP BY name"},
		"SELECT name, sum(balance) FROM customers GROUP BY name ORDER BY 2": {
			Aggregate: []engine.AggColumn{key(engine.Opaque), sumNum},
			Sort:      []engine.SortKey{{Column: 1, Type: engine.Numeric}}, Limit: -1},
		// A sort key not shown: each shard sends it, sorted, LIMIT n +
		// offset rows.
		"SELECT name FROM customers ORDER BY age DESC, customer_id LIMIT 5 OFFSET 2": {
			Merge:  []engine.SortKey{{Column: 1, Type: engine.Int, Desc: true, NullsFirst: true}, {Column: 2, Type: engine.Int}},
			Offset: 2, Limit: 5, Hidden: 2, Visible: 1,
			ShardSQL: "SELECT name, age, customer_id FROM customers ORDER BY age DESC, customer_id LIMIT 7"},
		// A qualified name is the table's column, not the output named
		// like it (found by the differential harness).
		"SELECT age AS customer_id FROM customers c ORDER BY c.customer_id LIMIT 5": {
			Merge: []engine.SortKey{{Column: 1, Type: engine.Int}}, Limit: 5, Hidden: 1, Visible: 1,
			ShardSQL: "SELECT age AS customer_id, customer_id FROM customers c ORDER BY c.customer_id LIMIT 5"},
		"SELECT name, balance FROM customers ORDER BY balance DESC LIMIT 3": {
			Merge: []engine.SortKey{{Column: 1, Type: engine.Numeric, Desc: true, NullsFirst: true}}, Limit: 3},
	} {
		st := planOne(t, p, xx, store(sql))
		if st.Err != nil || st.Merge != MergeEngine || !reflect.DeepEqual(st.Engine, want) {
			t.Errorf("%s:\n got %+v err %v\nwant %+v", sql, st.Engine, st.Err, want)
		}
	}
}

// byteOrderedSchema is testSchema whose listed text columns are under
// the C collation.
type byteOrderedSchema struct {
	fakeSchema
	c        map[string]bool
	nondeter bool // every text column's collation is nondeterministic
}

func (s byteOrderedSchema) TextCollation(db, schema, table, column string) (TextCollation, error) {
	return TextCollation{ByteOrder: s.c[db+"."+schema+"."+table+"."+column], Nondeterministic: s.nondeter}, nil
}

// TestNondeterministicTextIsNotGrouped: under a nondeterministic
// collation equal text may differ in bytes ('a' and 'A'), so GROUP BY,
// DISTINCT and count(DISTINCT) of such a column are refused across
// shards; under a deterministic one they are planned.
func TestNondeterministicTextIsNotGrouped(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	for _, nondeter := range []bool{false, true} {
		schema := byteOrderedSchema{fakeSchema: testSchema, nondeter: nondeter}
		for _, sql := range []string{
			"SELECT name, count(*) FROM customers GROUP BY name",
			"SELECT DISTINCT name FROM customers",
			"SELECT count(DISTINCT name) FROM customers",
			"SELECT count(*) FROM customers GROUP BY name",
		} {
			stmts, err := New(0).Plan(xx, 1, schema, store(sql))
			if err != nil {
				t.Fatal(err)
			}
			if planned := stmts[0].Merge == MergeEngine && stmts[0].Err == nil; planned == nondeter {
				t.Errorf("%s, nondeterministic %v: merge %v err %v", sql, nondeter, stmts[0].Merge, stmts[0].Err)
			}
		}
	}
}

// TestTextOrderNeedsCCollation: text is ordered (ORDER BY, min, max) by
// the engine only for columns the catalog says are under C or POSIX;
// under any other collation it is refused.
func TestTextOrderNeedsCCollation(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	for _, c := range []bool{false, true} {
		schema := byteOrderedSchema{fakeSchema: testSchema, c: map[string]bool{"store.public.customers.name": c}}
		for _, sql := range []string{
			"SELECT name FROM customers ORDER BY name LIMIT 5",
			"SELECT min(name), max(name) FROM customers",
			"SELECT customer_id, count(*) FROM customers GROUP BY customer_id ORDER BY max(name)",
		} {
			stmts, err := New(0).Plan(xx, 1, schema, store(sql))
			if err != nil {
				t.Fatal(err)
			}
			st := stmts[0]
			planned := st.Merge == MergeEngine && st.Err == nil
			if planned != c {
				t.Errorf("%s with C collation %v: merge %v err %v", sql, c, st.Merge, st.Err)
			}
			if planned && !st.Engine.OrdersBytes() {
				t.Errorf("%s: plan %+v does not say it orders bytes", sql, st.Engine)
			}
		}
	}
	if shardfunc.Text.String() != "text" {
		t.Fatal("unexpected type name")
	}
}
