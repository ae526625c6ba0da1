package planner

import "testing"

// SELECT set_config('name', 'value', is_local) alone with literals is a
// SET the router follows on every shard; any other call of set_config
// would change one backend's setting only, and is refused.
func TestSetConfig(t *testing.T) {
	top := testTop(t)
	for _, c := range []struct {
		sql  string
		want *Setting
	}{
		{"SELECT set_config('DateStyle', 'SQL, DMY', false)", &Setting{Op: SetValue, Name: "datestyle", Value: "SQL, DMY"}},
		{"SELECT pg_catalog.set_config('search_path', '', false)", &Setting{Op: SetValue, Name: "search_path"}},
		{"select set_config('app.user', '42', true)", &Setting{Op: SetValue, Name: "app.user", Value: "42", Local: true}},
	} {
		st := planOne(t, New(0), top, store(c.sql))
		if st.Err != nil || st.Setting == nil || *st.Setting != *c.want {
			t.Errorf("%s: setting %+v err %v, want %+v", c.sql, st.Setting, st.Err, c.want)
		}
	}
	for _, sql := range []string{
		"SELECT set_config('datestyle', $1, false)",
		"SELECT set_config('datestyle', 'SQL', 'false')",
		"SELECT set_config('app.user', name, true) FROM customers WHERE customer_id = 1",
		"SELECT set_config('datestyle', 'SQL', false), 1",
		"SELECT 1 WHERE set_config('datestyle', 'SQL', false) IS NOT NULL",
		"SELECT set_config('datestyle', 'SQL', false) FROM customers",
	} {
		st := planOne(t, New(0), top, store(sql))
		if errCode(st.Err) != "0A000" {
			t.Errorf("%s: err %v, setting %+v; want 0A000", sql, st.Err, st.Setting)
		}
	}
	// The plan holds the values: another value is another plan.
	p := New(100)
	planOne(t, p, top, store("SELECT set_config('datestyle', 'SQL', false)"))
	if st := planOne(t, p, top, store("SELECT set_config('datestyle', 'ISO', false)")); st.Setting == nil || st.Setting.Value != "ISO" {
		t.Errorf("cached set_config: %+v", st.Setting)
	}
}

// Sequences live on the authoritative shard: a statement that would call
// nextval on another shard's copy (duplicating values the authoritative
// one gives) is refused.
func TestSequenceCalls(t *testing.T) {
	top := testTop(t)
	for _, c := range []struct{ sql, want string }{
		{"SELECT nextval('s')", "select authoritative shard-0"},
		{"SELECT currval('s'), lastval()", "select authoritative shard-0"},
		{"SELECT nextval('s') FROM customers", "select error 0A000"},
		{"SELECT nextval('s') FROM customers WHERE customer_id = 1", "select error 0A000"},
		{"INSERT INTO customers (customer_id, name) VALUES (nextval('s'), 'x')", "insert error 0A000"},
		{"INSERT INTO customers (customer_id, name) VALUES (1, nextval('s')::text)", "insert error 0A000"},
		{"UPDATE customers SET name = setval('s', 5)::text WHERE customer_id = 1", "update error 0A000"},
		{"SELECT app.nextval('s') FROM customers WHERE customer_id = 1", "select shard customer-shard-2"},
	} {
		if got := summary(planOne(t, New(0), top, store(c.sql)), nil); got != c.want {
			t.Errorf("%s: %s, want %s", c.sql, got, c.want)
		}
	}
}
