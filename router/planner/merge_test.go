package planner

import (
	"slices"
	"testing"
)

// TestCountsMerge: a SELECT of counts over several shards is planned for
// summing; the same counts on one shard, and other reads, are not.
func TestCountsMerge(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(0)
	for sql, want := range map[string]MergeKind{
		"SELECT count(*) FROM customers":                                           MergeCounts,
		"SELECT count(*), count(name) FROM customers WHERE customer_id IN (1, 42)": MergeCounts,
		"SELECT pg_catalog.count(*) FROM customers":                                MergeCounts,
		// One shard answers alone; Merge says what to do if several did.
		"SELECT count(*) FROM customers WHERE customer_id = 42": MergeCounts,
		"SELECT * FROM customers":                               MergeRows,
		"SELECT * FROM customers LIMIT 7":                       MergeLimit,
		"EXPLAIN SELECT count(*) FROM customers":                MergeRows,
	} {
		st := planOne(t, p, xx, store(sql))
		if st.Err != nil || st.Merge != want {
			t.Errorf("%s: merge %v, err %v; want merge %v", sql, st.Merge, st.Err, want)
		}
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
// planned for merging, with each key's column, direction and NULLs.
func TestOrderedMerge(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(100)
	for sql, want := range map[string][]OrderKey{
		"SELECT * FROM customers ORDER BY customer_id LIMIT 5":                                  {{Column: 0}},
		"SELECT name, customer_id FROM customers ORDER BY customer_id DESC LIMIT 5":             {{Column: 1, Desc: true, NullsFirst: true}},
		"SELECT name, customer_id AS id FROM customers ORDER BY id NULLS FIRST LIMIT 5":         {{Column: 1, NullsFirst: true}},
		"SELECT c.* FROM customers c ORDER BY 1 DESC NULLS LAST LIMIT 5":                        {{Column: 0, Desc: true}},
		"SELECT customer_id, name FROM customers WHERE name > 'a' ORDER BY customer_id LIMIT 0": {{Column: 0}},
		// A qualified name is the table's column, not the output named
		// like it (found by the differential harness).
		"SELECT customer_id + 1 AS customer_id, customer_id FROM customers ORDER BY customers.customer_id LIMIT 5": {{Column: 1}},
		"SELECT customer_id AS id FROM customers c ORDER BY c.customer_id LIMIT 5":                                 {{Column: 0}},
	} {
		st := planOne(t, p, xx, store(sql))
		if st.Err != nil || st.Merge != MergeOrdered || !slices.Equal(st.Order, want) {
			t.Errorf("%s: merge %v order %+v err %v; want %+v", sql, st.Merge, st.Order, st.Err, want)
		}
	}
	for _, sql := range []string{
		"SELECT customer_id + 1 AS customer_id FROM customers ORDER BY customers.customer_id LIMIT 5",
		"SELECT name AS customer_id FROM customers c ORDER BY c.customer_id LIMIT 5",
		"SELECT age AS customer_id FROM customers ORDER BY customers.customer_id LIMIT 5",
		"SELECT age AS customer_id FROM customers c ORDER BY c.customer_id DESC LIMIT 5",
		"SELECT customer_id FROM customers c ORDER BY other.customer_id LIMIT 5",
	} {
		if st := planOne(t, p, xx, store(sql)); st.Merge == MergeOrdered {
			t.Errorf("%s: merged by %+v, but the key is not an output column", sql, st.Order)
		}
	}
	for sql, want := range map[string]int64{
		"SELECT * FROM customers ORDER BY customer_id LIMIT 5": 5,
		"SELECT * FROM customers ORDER BY customer_id LIMIT 8": 8,
	} {
		if st := planOne(t, p, xx, store(sql)); st.Limit.Value != want {
			t.Errorf("%s: limit %d, want %d", sql, st.Limit.Value, want)
		}
	}
}
