package planner

import (
	"strings"
	"testing"

	"github.com/tesseradb/tessera/topo/shardfunc"
)

const both = "select scatter customer-shard-1,customer-shard-2"

// colocationCases are golden routes on store_xxhash.json of statements
// over several sharded tables; FuzzPlan also takes their SQL as seeds.
var colocationCases = []struct{ sql, want string }{
	// A key predicate on one table does not restrict a table joined
	// on something else.
	{"SELECT count(*) FROM customers c JOIN orders o ON o.note = c.name WHERE c.customer_id = 42", "select error 0A000"},
	{"SELECT * FROM customers c CROSS JOIN orders o WHERE c.customer_id = 42", "select error 0A000"},
	{"SELECT * FROM customers c, orders o WHERE c.customer_id = 42", "select error 0A000"},
	{"SELECT * FROM customers c LEFT JOIN orders o ON o.note = c.name WHERE c.customer_id = 42", "select error 0A000"},
	{"SELECT * FROM customers c JOIN orders o ON o.customer_id = c.customer_id + 0 WHERE c.customer_id = 42", "select error 0A000"},
	{"SELECT * FROM customers c JOIN orders o ON o.customer_id = c.customer_id OR true WHERE c.customer_id = 42", "select error 0A000"},
	{"SELECT * FROM customers c JOIN orders o ON o.order_id = c.customer_id WHERE c.customer_id = 42", "select error 0A000"},
	// Unless each table has its own, reaching one shard.
	{"SELECT * FROM customers c, orders o WHERE c.customer_id = 42 AND o.customer_id = 42", "select shard customer-shard-1"},
	{"SELECT * FROM customers c, orders o WHERE c.customer_id = 42 AND o.customer_id = 1", "select error 0A000"},
	{"SELECT * FROM customers c, orders o WHERE c.customer_id IN (1, 42) AND o.customer_id = 42", "select error 0A000"},
	// Joins on the shard key are colocated.
	{"SELECT * FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id = 42", "select shard customer-shard-1"},
	{"SELECT * FROM customers c JOIN orders o ON c.customer_id = o.customer_id AND o.total > 5 WHERE o.customer_id = 1", "select shard customer-shard-2"},
	{"SELECT * FROM customers c JOIN orders o USING (customer_id) WHERE customer_id = 42", "select shard customer-shard-1"},
	{"SELECT * FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id IN (1, 42)", "select shard customer-shard-1,customer-shard-2"},
	{"SELECT * FROM customers c JOIN orders o ON o.customer_id = c.customer_id", both},
	{"SELECT count(*) FROM customers c JOIN orders o USING (customer_id)", both},
	{"SELECT * FROM customers a JOIN orders b USING (customer_id) JOIN orders c USING (customer_id) WHERE customer_id = 42", "select shard customer-shard-1"},
	{"SELECT * FROM customers c, LATERAL (SELECT * FROM orders o WHERE o.customer_id = c.customer_id) x WHERE c.customer_id = 42", "select shard customer-shard-1"},
	// Outer joins: the nullable side is restricted by the ON
	// equality, the preserved side only by WHERE.
	{"SELECT * FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id", both},
	{"SELECT * FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id = 42", "select shard customer-shard-1"},
	{"SELECT * FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id WHERE o.customer_id = 42", "select shard customer-shard-1"},
	{"SELECT * FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id AND c.customer_id = 42", both},
	{"SELECT * FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id AND o.customer_id = 42", both},
	{"SELECT * FROM orders o RIGHT JOIN customers c ON o.customer_id = c.customer_id WHERE c.customer_id = 42", "select shard customer-shard-1"},
	{"SELECT * FROM customers c FULL JOIN orders o ON o.customer_id = c.customer_id", "select error 0A000"},
	{"SELECT * FROM customers c FULL JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id = 42", "select error 0A000"},
	// Subqueries.
	{"SELECT * FROM customers WHERE customer_id = 42 AND name IN (SELECT note FROM orders)", "select error 0A000"},
	{"SELECT * FROM customers WHERE name IN (SELECT note FROM orders WHERE customer_id = 42)", "select error 0A000"},
	{"SELECT * FROM customers WHERE customer_id = 42 AND name IN (SELECT note FROM orders WHERE customer_id = 42)", "select shard customer-shard-1"},
	{"SELECT * FROM customers WHERE customer_id IN (SELECT customer_id FROM orders)", both},
	{"SELECT * FROM customers c WHERE c.customer_id = ANY (SELECT o.customer_id FROM orders o WHERE o.total > 1)", both},
	{"SELECT * FROM customers WHERE customer_id NOT IN (SELECT customer_id FROM orders)", "select error 0A000"},
	{"SELECT * FROM customers WHERE customer_id IN (SELECT customer_id FROM orders LIMIT 3)", "select error 0A000"},
	{"SELECT * FROM customers WHERE customer_id IN (SELECT max(customer_id) FROM orders GROUP BY note)", "select error 0A000"},
	{"SELECT * FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id)", both},
	{"SELECT * FROM customers c WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id) AND c.customer_id = 42", "select shard customer-shard-1"},
	{"SELECT * FROM customers c WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id AND o.customer_id = 42)", both},
	{"SELECT * FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.note = c.name)", "select error 0A000"},
	{"SELECT * FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.note = c.name) AND c.customer_id = 42", "select error 0A000"},
	{"SELECT * FROM customers c WHERE c.customer_id = 42 AND EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = 42 AND o.note = c.name)", "select shard customer-shard-1"},
	{"SELECT c.name, (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) FROM customers c WHERE c.customer_id = 42", "select shard customer-shard-1"},
	{"SELECT (SELECT count(*) FROM orders o WHERE o.note = c.name) FROM customers c WHERE c.customer_id = 42", "select error 0A000"},
	{"SELECT EXISTS (SELECT 1 FROM customers WHERE name = 'x')", "select error 0A000"},
	{"SELECT EXISTS (SELECT 1 FROM customers WHERE customer_id = 42)", "select shard customer-shard-1"},
	{"SELECT * FROM (SELECT * FROM customers WHERE customer_id = 42) x", "select shard customer-shard-1"},
	{"SELECT * FROM (SELECT * FROM customers) x JOIN orders o ON o.customer_id = x.customer_id WHERE o.customer_id = 42", "select error 0A000"},
	{"SELECT * FROM generate_series(1, (SELECT count(*) FROM customers)) g", "select error 0A000"},
	{"WITH o AS (SELECT * FROM orders) SELECT * FROM customers c JOIN o ON o.customer_id = c.customer_id WHERE c.customer_id = 42", "select error 0A000"},
	{"WITH c AS (SELECT * FROM customers WHERE customer_id = 42) SELECT * FROM c a JOIN c b ON true", "select shard customer-shard-1"},
	{"WITH c AS (SELECT * FROM customers) SELECT * FROM c a JOIN c b ON a.customer_id = b.customer_id", "select error 0A000"},
	// Set operations: one shard only.
	{"SELECT name FROM customers WHERE customer_id = 42 UNION ALL SELECT note FROM orders WHERE customer_id = 42", "select shard customer-shard-1"},
	{"SELECT name FROM customers WHERE customer_id = 42 UNION ALL SELECT note FROM orders WHERE customer_id = 1", "select error 0A000"},
	// Writes.
	{"UPDATE customers SET name = 'x' WHERE name IN (SELECT note FROM orders)", "update error 0A000"},
	{"UPDATE customers c SET name = o.note FROM orders o WHERE o.customer_id = c.customer_id", "update scatter customer-shard-1,customer-shard-2"},
	{"UPDATE customers c SET name = o.note FROM orders o WHERE o.customer_id = c.customer_id AND o.customer_id = 1", "update shard customer-shard-2"},
	{"DELETE FROM customers c USING orders o WHERE o.note = c.name AND c.customer_id = 42", "delete error 0A000"},
	{"DELETE FROM customers WHERE customer_id IN (SELECT customer_id FROM orders WHERE total > 5)", "delete scatter customer-shard-1,customer-shard-2"},
	{"WITH x AS (INSERT INTO customers (customer_id) VALUES (5) RETURNING *) SELECT * FROM x", "select error 0A000"},
	{"INSERT INTO customers (customer_id, name) VALUES (42, (SELECT note FROM orders WHERE customer_id = 42))", "insert error 0A000"},
}

// TestColocation: a statement over several sharded tables (or a sharded
// table and reference tables) runs on one shard only if every sharded
// table is restricted to it, by its own key predicate or through equal
// shard keys, and on several only if its answer rows are made of one
// shard's rows each (issue #16).
func TestColocation(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(0)
	for _, c := range colocationCases {
		st := planOne(t, p, xx, store(c.sql))
		if got := summary(st, nil); got != c.want {
			t.Errorf("%s\n got %s\nwant %s (err %v)", c.sql, got, c.want, st.Err)
		}
	}

	// The keys of a table not joined by the shard key must reach the
	// routing key's shard, which EXPLAIN (TESSERA) says.
	st := planOne(t, p, xx, store("EXPLAIN (TESSERA) SELECT * FROM customers c, orders o WHERE c.customer_id = 42 AND o.customer_id = $1"))
	got := strings.Join(st.Describe(params(int32(1))), "\n")
	if !strings.Contains(got, "Key: customer_id = $1 (int4, shard index customer_id_xxhash), of another table: must reach the same one shard") ||
		!strings.HasSuffix(got, "Error: 0A000: a join not on the shard key across shards is not supported yet (its shard-key values reach more than one shard of group customer_data)") {
		t.Errorf("got\n%s", got)
	}

	// Tables routed by different indexes are not colocated, even on
	// equal keys.
	mod := parseTopology(t, strings.Replace(storeTopology(t), `"shard_index": "customer_id_xxhash"`, `"shard_index": "customer_id_mod"`, 1))
	st = planOne(t, p, mod, store("SELECT * FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id = 42"))
	if got := summary(st, nil); got != "select error 0A000" {
		t.Errorf("join of tables routed by other indexes: %s", got)
	}

	// Reference tables are on every shard: a row of theirs is answered
	// by each shard unless a sharded table's row anchors it to one.
	ref := parseTopology(t, referenceTopology)
	for _, c := range []struct{ sql, want string }{
		{"SELECT * FROM customers c LEFT JOIN countries ON countries.code = c.country", both},
		{"SELECT * FROM countries LEFT JOIN customers c ON countries.code = c.country", "select error 0A000"},
		{"SELECT * FROM countries LEFT JOIN customers c ON countries.code = c.country WHERE c.customer_id = 42", "select shard customer-shard-1"},
		{"SELECT * FROM countries WHERE code IN (SELECT country FROM customers)", "select error 0A000"},
		{"SELECT * FROM countries WHERE code IN (SELECT country FROM customers WHERE customer_id = 42)", "select shard customer-shard-1"},
		{"SELECT * FROM countries WHERE code IN (SELECT country FROM customers WHERE customer_id IN (1, 42))", "select error 0A000"},
		{"WITH x AS (UPDATE countries SET code = 'x' RETURNING *) SELECT * FROM customers", "select error 0A000"},
	} {
		st := planOne(t, p, ref, store(c.sql))
		if got := summary(st, nil); got != c.want {
			t.Errorf("%s\n got %s\nwant %s (err %v)", c.sql, got, c.want, st.Err)
		}
	}
}

// Two tables of one group sharded by different columns with the same
// function (TPC-H's orders by o_orderkey and lineitem by l_orderkey) place
// equal values on one shard: a join equating their keys is colocated.
// Another function (modulo) over the same group is not.
func TestColocatedByAlikeIndexes(t *testing.T) {
	top := parseTopology(t, `{
  "authoritative_shard_group": "main",
  "shard_indexes": {
    "o_xx": {"type": "xxhash", "columns": ["o_orderkey"]},
    "l_xx": {"type": "xxhash", "columns": ["l_orderkey"]},
    "m_mod": {"type": "modulo", "columns": ["m_orderkey"], "index_params": {"modulus": 4}}
  },
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "g", "default_shard_index": "o_xx",
     "key_ranges": [{"shard_uid": "s1", "end": "80"}, {"shard_uid": "s2", "start": "80"}]}
  ],
  "databases": {"tpch": {"schemas": {"public": {"tables": {
    "orders": {"shard_group": "g", "shard_index": "o_xx"},
    "lineitem": {"shard_group": "g", "shard_index": "l_xx"},
    "marks": {"shard_group": "g", "shard_index": "m_mod"}
  }}}}}
}`)
	schema := fakeSchema{
		"tpch.public.orders.o_orderkey": shardfunc.Int8, "tpch.public.lineitem.l_orderkey": shardfunc.Int8,
		"tpch.public.marks.m_orderkey": shardfunc.Int8,
	}
	for _, c := range []struct{ sql, want string }{
		{"SELECT count(*) FROM orders o JOIN lineitem l ON l.l_orderkey = o.o_orderkey", "select scatter s1,s2"},
		{"SELECT * FROM orders o JOIN lineitem l ON l.l_orderkey = o.o_orderkey WHERE o.o_orderkey = 7", "select shard s"},
		{"SELECT * FROM orders o WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem WHERE l_orderkey > 3)", "select scatter s1,s2"},
		{"SELECT count(*) FROM orders o JOIN marks m ON m.m_orderkey = o.o_orderkey", "select error 0A000"},
	} {
		stmts, err := New(0).Plan(top, 1, schema, Input{SQL: c.sql, Database: "tpch", SearchPath: []string{"public"}, NoGather: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := summary(stmts[0], nil); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %s, want %s", c.sql, got, c.want)
		}
	}
}
