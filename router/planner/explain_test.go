package planner

import (
	"testing"
)

// TestExplainAnalyzePlanned: EXPLAIN (TESSERA, ANALYZE), in either order
// of its options, plans the statement it explains and marks itself for
// the router to run it; EXPLAIN (TESSERA) alone does not.
func TestExplainAnalyzePlanned(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	for _, sql := range []string{
		"EXPLAIN (TESSERA, ANALYZE) SELECT name, count(*) FROM customers GROUP BY name",
		"EXPLAIN (ANALYZE, TESSERA) SELECT * FROM customers WHERE customer_id = 1",
	} {
		st := planOne(t, New(0), xx, store(sql))
		if st.Err != nil || st.Kind != ExplainTessera || !st.Analyze || st.Inner == nil || st.Inner.Kind != Select {
			t.Errorf("%s: kind %v, analyze %v, inner %+v, err %v", sql, st.Kind, st.Analyze, st.Inner, st.Err)
		}
	}
	if st := planOne(t, New(0), xx, store("EXPLAIN (TESSERA) SELECT * FROM customers")); st.Err != nil || st.Kind != ExplainTessera || st.Analyze {
		t.Errorf("EXPLAIN (TESSERA): kind %v, analyze %v, %v", st.Kind, st.Analyze, st.Err)
	}
}
