package planner

import (
	"strings"
	"testing"
)

// ON CONFLICT into a sharded table is planned when its arbiter includes
// the shard key, and refused when it may find a conflicting row only on
// another shard.
func TestOnConflictArbiterNeedsTheShardKey(t *testing.T) {
	top := testTop(t)
	for _, c := range []struct {
		sql     string
		refused bool
	}{
		{"INSERT INTO customers VALUES (42, 'a') ON CONFLICT (customer_id) DO UPDATE SET name = excluded.name", false},
		{"INSERT INTO customers VALUES (42, 'a') ON CONFLICT (name, customer_id) DO NOTHING", false},
		{"INSERT INTO customers VALUES (42, 'a') ON CONFLICT ON CONSTRAINT customers_pkey DO NOTHING", false},
		{"INSERT INTO customers VALUES (42, 'a') ON CONFLICT DO NOTHING", false}, // its only unique index has the key
		{"INSERT INTO customers VALUES (42, 'a')", false},
		{"INSERT INTO orders (customer_id, id, number) VALUES (42, 1, 7) ON CONFLICT ON CONSTRAINT orders_pkey DO NOTHING", false},
		{"INSERT INTO customers VALUES (42, 'a') ON CONFLICT (name) DO UPDATE SET name = excluded.name || '!'", true},
		{"INSERT INTO customers VALUES (42, 'a') ON CONFLICT (name) DO NOTHING", true},
		{"INSERT INTO customers VALUES (42, 'a') ON CONFLICT ((lower(name))) DO NOTHING", true},
		{"INSERT INTO orders (customer_id, id, number) VALUES (42, 1, 7) ON CONFLICT ON CONSTRAINT orders_number_key DO NOTHING", true},
		{"INSERT INTO orders (customer_id, id, number) VALUES (42, 1, 7), (7, 2, 8) ON CONFLICT DO NOTHING", true}, // every unique index
	} {
		st := planOne(t, New(0), top, store(c.sql))
		refused := errCode(st.Err) == "0A000"
		if refused != c.refused {
			t.Errorf("%s: err %v, want refused %v", c.sql, st.Err, c.refused)
		}
		if refused && !strings.Contains(st.Err.Error(), "each shard checks only its own rows") {
			t.Errorf("%s: %v, want the arbiter's reason", c.sql, st.Err)
		}
	}
}
