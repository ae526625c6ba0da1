package planner

import (
	"strings"
	"testing"
)

// A user's function runs where its statement runs and reads that shard's
// rows: a call of one that reads a sharded table (directly, through
// another function, or in PL/pgSQL) is refused unless the statement runs
// on one shard holding all it reads; one reading a reference table held
// there, or a CTE of its own name, is planned as before.
func TestFunctionsReadingTablesElsewhere(t *testing.T) {
	top := parseTopology(t, referenceTopology)
	for _, c := range []struct {
		sql     string
		refused bool
	}{
		{"SELECT n_customers()", true},
		{"SELECT public.n_customers()", true},
		{"SELECT via_other()", true},
		{"SELECT plp_count()", true},
		{"SELECT plp_dynamic()", true},                                       // its body is not all readable
		{"SELECT n_customers() FROM customers WHERE customer_id = 42", true}, // its group has two shards
		{"SELECT count(*) FROM customers WHERE name = 'x' AND n_customers() > 0", true},
		{"CALL n_customers()", true},
		{"SELECT n_currencies()", false}, // a copy on shard-0
		{"SELECT n_local()", false},
		{"SELECT app.n_customers()", false}, // no such function in app
		{"SELECT lower('X')", false},
	} {
		st := planOne(t, New(0), top, store(c.sql))
		refused := errCode(st.Err) == "0A000"
		if refused != c.refused {
			t.Errorf("%s: err %v, want refused %v", c.sql, st.Err, c.refused)
		}
		if refused && !strings.Contains(st.Err.Error(), "a function that reads tables on other shards") {
			t.Errorf("%s: %v, want the function's reason", c.sql, st.Err)
		}
	}
}

func TestPLpgSQLStatements(t *testing.T) {
	got, opaque := PLpgSQLStatements(`CREATE FUNCTION f(x int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  IF x > 0 THEN RETURN (SELECT count(*) FROM a); END IF;
  UPDATE b SET v = x;
  RETURN 0;
END $$`)
	joined := strings.Join(got, " | ")
	for _, want := range []string{"x > 0", "FROM a", "UPDATE b SET v = x"} {
		if !strings.Contains(joined, want) {
			t.Errorf("statements %q lack %q", joined, want)
		}
	}
	if opaque {
		t.Errorf("a body without dynamic SQL taken for opaque")
	}
	// EXECUTE of a constant string is read as its statement.
	got, opaque = PLpgSQLStatements(`CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$
BEGIN EXECUTE 'UPDATE c SET v = 1'; END $$`)
	if opaque || !strings.Contains(strings.Join(got, " | "), "UPDATE c SET v = 1") {
		t.Errorf("EXECUTE of a constant: %q, opaque %v", got, opaque)
	}
	// Each way of running SQL built at run time makes a body opaque.
	for _, body := range []string{
		"BEGIN EXECUTE 'SELECT count(*) FROM ' || t; END",
		"DECLARE r record; BEGIN FOR r IN EXECUTE 'SELECT 1 FROM ' || t LOOP END LOOP; END",
		"BEGIN RETURN QUERY EXECUTE format('SELECT 1 FROM %I', t); END",
		"DECLARE c refcursor; BEGIN OPEN c FOR EXECUTE 'SELECT 1 FROM ' || t; END",
		"BEGIN this does not parse; END",
	} {
		if _, opaque := PLpgSQLStatements("CREATE FUNCTION f(t text) RETURNS SETOF int LANGUAGE plpgsql AS $$" + body + "$$"); !opaque {
			t.Errorf("%s: not taken for opaque", body)
		}
	}
}

// A DO block runs on the authoritative shard: one that reads or writes a
// table with rows elsewhere, runs dynamic SQL, calls a function that
// reads elsewhere, or is in another language is refused on a topology
// of several shards; one touching only tables held there is planned.
func TestDoBlocksReadingTablesElsewhere(t *testing.T) {
	top := parseTopology(t, referenceTopology)
	for _, c := range []struct {
		sql     string
		refused bool
	}{
		{"DO $$BEGIN UPDATE customers SET name = 'x'; END$$", true},
		{"DO $$DECLARE n int; BEGIN SELECT count(*) INTO n FROM customers; END$$", true},
		{"DO $$BEGIN PERFORM n_customers(); END$$", true},
		{"DO $$BEGIN EXECUTE 'SELECT ' || 1; END$$", true},
		{"DO $$BEGIN EXECUTE 'UPDATE customers SET name = ''x'''; END$$", true},
		{"DO $$BEGIN EXECUTE 'CREATE TABLE easi AS SELECT * FROM currencies'; END$$", false}, // a constant, read
		{"DO LANGUAGE plperl $$ spi_exec_query('SELECT 1') $$", true},
		{"DO $$BEGIN INSERT INTO currencies VALUES ('EUR'); END$$", false}, // a copy on shard-0
		{"DO $$BEGIN RAISE NOTICE 'hello'; END$$", false},
		{"DO $$DECLARE n int; BEGIN SELECT count(*) INTO n FROM pg_class; END$$", false},
	} {
		st := planOne(t, New(0), top, store(c.sql))
		refused := errCode(st.Err) == "0A000"
		if refused != c.refused {
			t.Errorf("%s: err %v, want refused %v", c.sql, st.Err, c.refused)
		}
	}
	// With one shard there is nothing elsewhere.
	one := parseTopology(t, `{"authoritative_shard_group": "main",
  "shard_groups": [{"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]}]}`)
	if st := planOne(t, New(0), one, store("DO $$BEGIN EXECUTE 'SELECT ' || 1; END$$")); st.Err != nil {
		t.Errorf("DO on one shard: %v", st.Err)
	}
}

// A trigger runs on the shard of the row it fires for: a write whose
// trigger function writes or reads a table not placed with the written
// table is refused; one reading a reference table held there, or
// writing its own group's tables, is planned as before.
func TestTriggersReadingTablesElsewhere(t *testing.T) {
	// audited: sharded like customers.
	top := parseTopology(t, strings.Replace(referenceTopology, `"customers": {"shard_group": "customer_data"}`,
		`"customers": {"shard_group": "customer_data"}, "audited": {"shard_group": "customer_data"}`, 1))
	for _, c := range []struct {
		sql     string
		refused bool
	}{
		{"INSERT INTO audited (customer_id) VALUES (42)", true},
		{"UPDATE audited SET name = 'b' WHERE customer_id = 42", true},
		{"DELETE FROM audited WHERE customer_id = 42", true},
		{"INSERT INTO customers VALUES (42, 'a')", false}, // no trigger
		{"INSERT INTO items VALUES (1)", true},
		{"INSERT INTO app.accounts (customer_id) VALUES (42)", false},
		{"SELECT * FROM audited WHERE customer_id = 42", false}, // reads fire no trigger
		{"INSERT INTO currencies VALUES ('EUR')", false},
	} {
		st := planOne(t, New(0), top, store(c.sql))
		refused := errCode(st.Err) == "0A000"
		if refused != c.refused {
			t.Errorf("%s: err %v, want refused %v", c.sql, st.Err, c.refused)
		}
		if refused && !strings.Contains(st.Err.Error(), "trigger function") {
			t.Errorf("%s: %v, want the trigger's reason", c.sql, st.Err)
		}
	}
}
