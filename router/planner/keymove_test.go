package planner

import (
	"strings"
	"testing"

	"github.com/tesseradb/tessera/pgerr"
)

// An UPDATE that assigns the shard key plans as a KeyMove on the shards
// its WHERE reaches: the UPDATE returning where its rows lie, and the
// INSERT that puts them back with the client's RETURNING.
func TestKeyUpdatePlans(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(0)
	for _, tc := range []struct {
		sql, route, update, head, tail, describe string
	}{
		{
			sql:      "UPDATE customers SET customer_id = 5 WHERE customer_id = 42",
			route:    "update shard customer-shard-1",
			update:   "UPDATE customers SET customer_id = 5 WHERE customer_id = 42 RETURNING customers.tableoid, customers.ctid, customers.*",
			head:     "INSERT INTO customers (customer_id, name) OVERRIDING SYSTEM VALUE VALUES ",
			describe: "INSERT INTO customers (customer_id, name) OVERRIDING SYSTEM VALUE SELECT customer_id, name FROM customers WHERE false",
		},
		{
			sql:      "UPDATE public.customers AS c SET name = upper(c.name), customer_id = c.customer_id + $1 WHERE name = $2 RETURNING c.customer_id, name",
			route:    "update scatter customer-shard-1,customer-shard-2",
			update:   "UPDATE public.customers c SET name = upper(c.name), customer_id = c.customer_id + $1 WHERE name = $2 RETURNING c.tableoid, c.ctid, c.*",
			head:     "INSERT INTO public.customers AS c (customer_id, name) OVERRIDING SYSTEM VALUE VALUES ",
			tail:     " RETURNING c.customer_id, name",
			describe: "INSERT INTO public.customers AS c (customer_id, name) OVERRIDING SYSTEM VALUE SELECT customer_id, name FROM public.customers WHERE false RETURNING c.customer_id, name",
		},
	} {
		st := planOne(t, p, xx, store(tc.sql))
		if got := summary(st, params(int64(1), "x")); got != tc.route {
			t.Errorf("%s: route %s, want %s", tc.sql, got, tc.route)
		}
		km := st.KeyMove
		if km == nil {
			t.Errorf("%s: no KeyMove (%v)", tc.sql, st.Err)
			continue
		}
		for _, c := range [][3]string{{"update", km.Update, tc.update}, {"head", km.InsertHead, tc.head}, {"tail", km.InsertTail, tc.tail}, {"describe", km.Describe, tc.describe}} {
			if c[1] != c[2] {
				t.Errorf("%s: %s\n got %s\nwant %s", tc.sql, c[0], c[1], c[2])
			}
		}
		if km.Returning != (tc.tail != "") || km.ReturningParams || strings.Join(km.Columns, ",") != "customer_id,name" || km.Table.Table != "customers" {
			t.Errorf("%s: %+v", tc.sql, km)
		}
	}
}

// A parameter in RETURNING is flagged: the router's INSERT has no Bind
// to give it.
func TestKeyUpdateReturningParams(t *testing.T) {
	st := planOne(t, New(0), loadTopology(t, "store_xxhash.json"), store("UPDATE customers SET customer_id = $1 WHERE customer_id = $2 RETURNING name || $3"))
	if st.KeyMove == nil || !st.KeyMove.ReturningParams {
		t.Fatalf("%+v (%v)", st.KeyMove, st.Err)
	}
}

// What the three steps could not do exactly is refused with 0A000.
func TestKeyUpdateRefusals(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(0)
	for _, sql := range []string{
		"UPDATE customers SET customer_id = DEFAULT WHERE customer_id = 1",
		"UPDATE customers SET (customer_id, name) = (2, 'x') WHERE customer_id = 1",
		"UPDATE customers SET customer_id = 2, name[1] = 'x' WHERE customer_id = 1",
		"UPDATE customers SET customer_id = o.customer_id FROM orders o WHERE o.customer_id = customers.customer_id",
		"UPDATE customers SET customer_id = 2 WHERE CURRENT OF c",
		"WITH x AS (SELECT 1) UPDATE customers SET customer_id = 2 WHERE customer_id = 1",
		"UPDATE ONLY customers SET customer_id = 2 WHERE customer_id = 1",
	} {
		st := planOne(t, p, xx, store(sql))
		if st.Err == nil || pgerr.Code(st.Err) != pgerr.FeatureNotSupported || st.KeyMove != nil {
			t.Errorf("%s: err %v, KeyMove %v", sql, st.Err, st.KeyMove != nil)
		}
	}
	// A table with an alternate shard index keeps its refusal.
	top := loadTopology(t, "extenddb.json")
	st := planOne(t, p, top, Input{SQL: "UPDATE stream_records SET base_pk = 'x' WHERE base_pk = 'account-123'", Database: "extenddb"})
	if pgerr.Code(st.Err) != pgerr.FeatureNotSupported || !strings.Contains(st.Err.Error(), "alternate shard indexes") {
		t.Errorf("alternate: %v", st.Err)
	}
}
