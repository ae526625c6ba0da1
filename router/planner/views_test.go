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
	})
	got := v.reads[[2]string{"s", "a"}]
	if len(got) != 2 || !(got[0] == [2]string{"s", "t1"} || got[1] == [2]string{"s", "t1"}) {
		t.Fatalf("a reads %v, want t1 and t2", got)
	}
}
