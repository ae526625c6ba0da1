package ddl

import "testing"

func TestRetargetRunsTheStatementOnAnotherTable(t *testing.T) {
	got, err := Retarget("ALTER TABLE orders ALTER COLUMN id TYPE bigint, ADD COLUMN note text", "public", "_tessera_shadow_orders")
	if err != nil {
		t.Fatal(err)
	}
	want := "ALTER TABLE public._tessera_shadow_orders ALTER COLUMN id TYPE bigint, ADD COLUMN note text"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, sql := range []string{
		"ALTER TABLE orders ALTER COLUMN id TYPE bigint USING id * 2",
		"CREATE INDEX i ON orders (id)",
		"ALTER TABLE a ADD COLUMN x int; ALTER TABLE b ADD COLUMN y int",
	} {
		if out, err := Retarget(sql, "public", "s"); err == nil {
			t.Errorf("%s: got %q, want a refusal", sql, out)
		}
	}
}
