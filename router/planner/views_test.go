package planner

import (
	"strings"
	"testing"
)

// A view is placed as an unlisted relation of its schema (main, here),
// where it reads that shard's rows only: a view over a table of another
// group is refused, for reads and writes, and cannot be created through
// the router; a view over what its shard holds (a reference table there,
// or unlisted tables) is planned as before, and dropping or altering a
// refused view still works.
func TestViewsOverTablesPlacedElsewhere(t *testing.T) {
	top := parseTopology(t, referenceTopology)
	for _, c := range []struct {
		sql     string
		path    []string
		refused bool
	}{
		{"SELECT * FROM v_customers", nil, true},
		{"SELECT count(*) FROM all_customers", nil, true}, // through another view
		{"SELECT * FROM public.all_customers WHERE customer_id = 42", nil, true},
		{"SELECT * FROM items WHERE id IN (SELECT customer_id FROM v_customers)", nil, true},
		{"INSERT INTO v_customers (customer_id, name) VALUES (42, 'x')", nil, true},
		{"UPDATE all_customers SET name = 'y' WHERE customer_id = 42", nil, true},
		{"COPY (SELECT * FROM v_customers) TO STDOUT", nil, true},
		{"CREATE TABLE snap AS SELECT * FROM v_customers", nil, true},
		{"SELECT * FROM acct_view", []string{"app"}, true},
		{"SELECT * FROM acct_view", []string{"public", "app"}, true}, // any schema of the path
		{"SELECT * FROM app.acct_view", nil, true},
		{"CREATE VIEW mine AS SELECT * FROM customers", nil, true},
		{"CREATE OR REPLACE VIEW mine AS SELECT c.name FROM items i JOIN customers c ON c.customer_id = i.id", nil, true},
		// Placed with their view.
		{"SELECT * FROM eur", nil, false},
		{"SELECT * FROM acct_view", nil, false}, // not on the path
		{"CREATE VIEW mine AS SELECT * FROM items", nil, false},
		{"CREATE VIEW mine AS SELECT * FROM currencies", nil, false},
		{"DROP VIEW all_customers", nil, false},
		{"ALTER VIEW v_customers RENAME TO old_customers", nil, false},
		{"SELECT * FROM customers WHERE customer_id = 42", nil, false},
	} {
		in := store(c.sql)
		if c.path != nil {
			in.SearchPath = c.path
		}
		st := planOne(t, New(0), top, in)
		refused := errCode(st.Err) == "0A000"
		if refused != c.refused {
			t.Errorf("%s (path %v): err %v, want refused %v", c.sql, c.path, st.Err, c.refused)
		}
		if refused && !strings.Contains(st.Err.Error(), "a view over tables on other shards") {
			t.Errorf("%s: %v, want the view's reason", c.sql, st.Err)
		}
	}
}

func TestNewViewsFollowsViewsOfViews(t *testing.T) {
	v := NewViews([][4]string{
		{"s", "a", "s", "b"}, {"s", "b", "s", "c"}, {"s", "c", "s", "t1"},
		{"s", "c", "s", "a"}, // a cycle cannot loop
		{"s", "b", "s", "t2"},
	}, nil)
	got := v.reads[[2]string{"s", "a"}]
	if len(got) != 2 || !(got[0] == [2]string{"s", "t1"} || got[1] == [2]string{"s", "t1"}) {
		t.Fatalf("a reads %v, want t1 and t2", got)
	}
}

// A table's own rule runs where its rows are written: a write to a
// sharded table whose rule inserts into an unsharded log is refused; a
// rule naming a reference table held on its shards (directly or through
// a view over one) is planned as before.
func TestRulesNamingTablesElsewhere(t *testing.T) {
	top := parseTopology(t, strings.Replace(referenceTopology, `"customers": {"shard_group": "customer_data"}`,
		`"customers": {"shard_group": "customer_data"}, "ruled": {"shard_group": "customer_data"}, "customers_ruled": {"shard_group": "customer_data"}`, 1))
	schema := fakeSchema{"store.public.ruled.customer_id": testSchema["store.public.customers.customer_id"],
		"store.public.customers_ruled.customer_id": testSchema["store.public.customers.customer_id"]}
	for k, v := range testSchema {
		schema[k] = v
	}
	for _, c := range []struct {
		sql     string
		refused bool
	}{
		{"INSERT INTO ruled (customer_id) VALUES (42)", true},
		{"DELETE FROM ruled WHERE customer_id = 42", true},
		{"SELECT * FROM ruled WHERE customer_id = 42", false},
		{"INSERT INTO app.accounts (customer_id) VALUES (42)", false},
		{"INSERT INTO customers_ruled (customer_id) VALUES (42)", false}, // eur reads currencies, held on every shard
	} {
		stmts, err := New(0).Plan(top, 1, schema, store(c.sql))
		if err != nil {
			t.Fatal(err)
		}
		refused := errCode(stmts[0].Err) == "0A000"
		if refused != c.refused {
			t.Errorf("%s: err %v, want refused %v", c.sql, stmts[0].Err, c.refused)
		}
	}
}
