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
		"EXPLAIN SELECT count(*) FROM customers":                MergeRows,
	} {
		st := planOne(t, p, xx, store(sql))
		if st.Err != nil || st.Merge != want {
			t.Errorf("%s: merge %v, err %v; want merge %v", sql, st.Merge, st.Err, want)
		}
	}
}
