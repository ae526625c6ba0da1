package planner

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
)

// TestAutoPrepare: which reads get a prepared form, and what it is.
func TestAutoPrepare(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(0)
	for sql, want := range map[string]string{
		// Literals beside a column under =, in IN lists, and LIMIT and
		// OFFSET counts become parameters.
		"SELECT * FROM customers WHERE customer_id = 42":                         "SELECT * FROM customers WHERE customer_id = $1 ($1 integer)",
		"SELECT name FROM customers WHERE 'bob' = name":                          "SELECT name FROM customers WHERE $1 = name ($1 unknown)",
		"SELECT * FROM customers WHERE customer_id IN (1, 2) LIMIT 5 OFFSET 10":  "SELECT * FROM customers WHERE customer_id IN ($1, $2) LIMIT $3 OFFSET $4 ($1 integer, $2 integer, $3 integer, $4 integer)",
		"SELECT * FROM customers c WHERE c.customer_id = 7 AND c.name = 'it''s'": "SELECT * FROM customers c WHERE c.customer_id = $1 AND c.name = $2 ($1 integer, $2 unknown)",
		"SELECT * FROM orders WHERE total = 2.5":                                 "SELECT * FROM orders WHERE total = $1 ($1 numeric)",
		"SELECT * FROM customers":                                                "SELECT * FROM customers",
		"SELECT * FROM customers WHERE customer_id = 1 -- the first\n":           "SELECT * FROM customers WHERE customer_id = $1 -- the first ($1 integer)",
		"SELECT * FROM orders WHERE customer_id = 1 AND order_id IN (SELECT 1)":  "",
		// Anywhere else a literal keeps the statement as written.
		"SELECT 1":                                                 "",
		"SELECT * FROM customers ORDER BY 1":                       "",
		"SELECT * FROM customers GROUP BY 1":                       "",
		"SELECT * FROM customers WHERE customer_id = -5":           "",
		"SELECT * FROM customers WHERE customer_id = 5::int8":      "",
		"SELECT * FROM customers WHERE customer_id = int8 '5'":     "",
		"SELECT * FROM customers WHERE customer_id > 5":            "",
		"SELECT * FROM customers WHERE lower(name) = 'x'":          "",
		"SELECT * FROM customers WHERE name = E'x'":                "",
		"SELECT * FROM customers WHERE name = $$x$$":               "",
		"SELECT * FROM customers WHERE name = B'1'":                "",
		"SELECT * FROM customers WHERE name = 'a'\n'b'":            "",
		"SELECT * FROM customers WHERE name = 'x' COLLATE \"C\"":   "",
		"SELECT * FROM customers WHERE customer_id = $1":           "",
		"SELECT * FROM customers WHERE a$b = 1":                    "",
		"SELECT * FROM customers WHERE customer_id = 1 + 1":        "",
		"SELECT * FROM customers WHERE customer_id = 1 FOR UPDATE": "",
		"SELECT nextval('s') FROM customers":                       "",
		"SELECT * FROM customers WHERE customer_id NOT IN (1, 2)":  "",
		"DELETE FROM customers WHERE customer_id = 1":              "",
		"SELECT * FROM customers WHERE customer_id IN (1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33)": "",
	} {
		st := planOne(t, p, xx, store(sql))
		got := ""
		if st.Auto != nil {
			got = st.Auto.describe()
		}
		if got != want {
			t.Errorf("%q: prepared form %q, want %q", sql, got, want)
		}
	}
	// Two statements in one Query run as written.
	stmts, err := p.Plan(xx, 1, testSchema, store("SELECT * FROM customers WHERE customer_id = 1; SELECT 2"))
	if err != nil || stmts[0].Auto != nil {
		t.Errorf("a statement of two got a prepared form (%v)", err)
	}
}

// TestAutoPrepareParams: the values sent for the parameters, and the
// literals whose statement runs as written instead, through the cache's
// shape sharing.
func TestAutoPrepareParams(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	p := New(100)
	const shape = "SELECT * FROM customers WHERE customer_id = %s AND name = %s"
	var name string
	for _, tc := range []struct {
		id, name string
		want     []string // nil: runs as written
	}{
		{"42", "'bob'", []string{"42", "bob"}},
		{"0007", "'it''s'", []string{"0007", "it's"}},
		{"2147483647", "''", []string{"2147483647", ""}},
		{"2147483648", "'x'", nil}, // int8 as a literal
		{"99999999999999999999", "'x'", nil},
		{"1", `'a\b'`, nil}, // depends on standard_conforming_strings
		{"1", "'ünïcode'", []string{"1", "ünïcode"}},
	} {
		sql := fmt.Sprintf(shape, tc.id, tc.name)
		st := planOne(t, p, xx, store(sql))
		if st.Auto == nil {
			t.Fatalf("%s: no prepared form", sql)
		}
		if name == "" {
			name = st.Auto.Name
		} else if st.Auto.Name != name {
			t.Errorf("%s: prepared as %s, the shape's other inputs as %s", sql, st.Auto.Name, name)
		}
		raw, ok := st.AppendAutoParams(nil)
		var got []string
		for ok && len(raw) >= 4 {
			n := int(binary.BigEndian.Uint32(raw))
			got, raw = append(got, string(raw[4:4+n])), raw[4+n:]
		}
		if !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("%s: parameters %q (usable %v), want %q", sql, got, ok, tc.want)
		}
	}
	if s := p.Stats(); s.Hits == 0 {
		t.Errorf("the inputs never shared a cached plan: %+v", s)
	}
}

// TestAutoPrepareGivesUp: a prepared form that keeps failing is dropped.
func TestAutoPrepareGivesUp(t *testing.T) {
	a := &AutoPrepared{}
	for i := 0; i < autoFallbackLimit; i++ {
		if !a.Usable() {
			t.Fatalf("unusable after %d failures", i)
		}
		a.Failed()
	}
	if a.Usable() {
		t.Errorf("still usable after %d failures", autoFallbackLimit)
	}
}
