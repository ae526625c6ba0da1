package planner

import (
	"testing"

	"github.com/tesseradb/tessera/pgerr"
)

// TestExplainAnalyzeRefused: EXPLAIN (TESSERA, ANALYZE) is refused with
// 0A000 until rows and times are measured, rather than answered with the
// plan alone.
func TestExplainAnalyzeRefused(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	for _, sql := range []string{
		"EXPLAIN (TESSERA, ANALYZE) SELECT name, count(*) FROM customers GROUP BY name",
		"EXPLAIN (ANALYZE, TESSERA) SELECT * FROM customers WHERE customer_id = 1",
	} {
		if st := planOne(t, New(0), xx, store(sql)); pgerr.Code(st.Err) != pgerr.FeatureNotSupported {
			t.Errorf("%s: %v, want 0A000", sql, st.Err)
		}
	}
	if st := planOne(t, New(0), xx, store("EXPLAIN (TESSERA) SELECT * FROM customers")); st.Err != nil || st.Kind != ExplainTessera {
		t.Errorf("EXPLAIN (TESSERA): kind %v, %v", st.Kind, st.Err)
	}
}
