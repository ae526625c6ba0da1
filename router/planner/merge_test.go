package planner

import "testing"

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
