package planner

import (
	"strings"
	"testing"
)

// A call the catalog shows to be an aggregate the planner does not know
// is refused across shards: scattered, it would answer one row per shard.
// The same call on one shard, of a plain function, or of an aggregate the
// search path does not find, is planned as before.
func TestUserDefinedAggregates(t *testing.T) {
	top := testTop(t)
	for _, c := range []struct {
		sql     string
		path    []string
		refused bool
	}{
		{"SELECT my_sum(customer_id) FROM customers", nil, true},
		{"SELECT MY_SUM(customer_id) FROM customers", nil, true},
		{"SELECT public.my_sum(customer_id) FROM customers", nil, true},
		{"SELECT store.public.my_sum(customer_id) FROM customers", nil, true},
		{"SELECT my_sum(customer_id) FROM customers WHERE customer_id IN (1, 42)", nil, true},
		{"SELECT * FROM customers WHERE customer_id > (SELECT my_sum(customer_id) FROM customers)", nil, true},
		{"SELECT count(*) FROM customers WHERE customer_id > (SELECT my_sum(1))", nil, true},
		// A pg_catalog aggregate missing from the planner's list.
		{"SELECT regr_fancy(customer_id) FROM customers", nil, true},
		{"SELECT pg_catalog.regr_fancy(customer_id) FROM customers", nil, true},
		// app's aggregates, found only when app is on the path.
		{"SELECT total(customer_id) FROM customers", nil, false},
		{"SELECT total(customer_id) FROM customers", []string{"public", "app"}, true},
		{"SELECT app.total(customer_id) FROM customers", nil, true},
		{"SELECT count(*) FROM customers", []string{"app", "public"}, true},
		{"SELECT count(*) FROM customers", nil, false},
		{"SELECT pg_catalog.count(*) FROM customers", []string{"app", "public"}, false},
		// my_sum in a schema that has none is somebody's plain function.
		{"SELECT app.my_sum(customer_id) FROM customers", nil, false},
		{"SELECT lower(name) FROM customers", nil, false},
		// One shard answers any aggregate.
		{"SELECT my_sum(customer_id) FROM customers WHERE customer_id = 42", nil, false},
	} {
		in := store(c.sql)
		if c.path != nil {
			in.SearchPath = c.path
		}
		st := planOne(t, New(0), top, in)
		err := st.Err
		if err == nil {
			_, err = st.Shards(nil) // keys on several shards
		}
		refused := errCode(err) == "0A000"
		if refused != c.refused {
			t.Errorf("%s (path %v): err %v, want refused %v", c.sql, c.path, err, c.refused)
		}
		if refused && !strings.Contains(err.Error(), userAggregates) && !strings.Contains(err.Error(), joinNotOnShardKey) {
			t.Errorf("%s: %v, want the reason %q", c.sql, err, userAggregates)
		}
	}
}

// A snapshot cannot see DDL not yet committed, nor DDL earlier in the same
// query string: then every call of a function not known to be plain is
// taken for an aggregate.
func TestAggregatesAfterDDL(t *testing.T) {
	top := testTop(t)
	in := store("SELECT new_agg(customer_id) FROM customers")
	if st := planOne(t, New(0), top, in); st.Err != nil {
		t.Fatalf("unknown to the snapshot, outside DDL: %v", st.Err)
	}
	p := New(100)
	planOne(t, p, top, in) // cached as a plain call
	in.UncommittedDDL = true
	if st := planOne(t, p, top, in); errCode(st.Err) != "0A000" {
		t.Errorf("in a transaction that ran DDL: %v, want 0A000", st.Err)
	}
	for _, sql := range []string{"SELECT lower(name) FROM customers", "SELECT count(*) FROM customers"} {
		in.SQL = sql
		if st := planOne(t, p, top, in); st.Err != nil {
			t.Errorf("%s in a transaction that ran DDL: %v", sql, st.Err)
		}
	}
	stmts, err := New(0).Plan(top, 1, testSchema, store("CREATE AGGREGATE new_agg (int) (sfunc = int4pl, stype = int); SELECT new_agg(customer_id) FROM customers"))
	if err != nil {
		t.Fatal(err)
	}
	if errCode(stmts[1].Err) != "0A000" {
		t.Errorf("after CREATE AGGREGATE in the same string: %v, want 0A000", stmts[1].Err)
	}
}

// An integer literal compared with an integer shard key without a cast is
// typed by its value in Postgres, which compares across types: beyond the
// column's range it matches no row. Cast, quoted or inserted, it fails as
// the column's type does (22003).
func TestIntegerKeysBeyondTheColumnType(t *testing.T) {
	top := testTop(t)
	for _, c := range []struct{ sql, want string }{
		{"SELECT * FROM customers WHERE customer_id = 99999999999999999999", "select shard customer-shard-1"},
		{"SELECT * FROM customers WHERE customer_id = -99999999999999999999", "select shard customer-shard-1"},
		{"SELECT * FROM customers WHERE customer_id IN (99999999999999999999, 42)", "select shard customer-shard-1"},
		{"SELECT * FROM customers WHERE customer_id IN (99999999999999999999, 1)", "select shard customer-shard-2"},
		{"SELECT * FROM orders WHERE customer_id = 3000000000", "select shard customer-shard-1"},
		{"DELETE FROM customers WHERE customer_id = 99999999999999999999", "delete shard customer-shard-1"},
		{"SELECT * FROM customers WHERE customer_id = '99999999999999999999'", "select error 22003"},
		{"SELECT * FROM customers WHERE customer_id = 99999999999999999999::int8", "select error 22003"},
		{"SELECT * FROM orders WHERE customer_id = '3000000000'", "select error 22003"},
		{"INSERT INTO customers (customer_id) VALUES (99999999999999999999)", "insert error 22003"},
	} {
		if got := summary(planOne(t, New(0), top, store(c.sql)), nil); got != c.want {
			t.Errorf("%s: %s, want %s", c.sql, got, c.want)
		}
	}
}
