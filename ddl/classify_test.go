package ddl

import (
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	facts := &TableFacts{
		ColumnTypes: map[string]string{
			"name":  "character varying(20)",
			"price": "numeric(10,2)",
			"id":    "integer",
		},
		ProvenNotNull: map[string]bool{"email": true},
	}
	for _, tc := range []struct {
		sql       string
		facts     *TableFacts
		path      Path
		exec      Execution
		table     string
		reasonHas string
	}{
		// Direct: catalog-only changes.
		{sql: "ALTER TABLE orders ADD COLUMN qty int NOT NULL DEFAULT 0", path: Direct, exec: InTransaction, table: "orders", reasonHas: "constant or NULL default"},
		{sql: "ALTER TABLE orders ADD COLUMN note text", path: Direct, table: "orders"},
		{sql: "ALTER TABLE orders ADD COLUMN flag boolean DEFAULT false", path: Direct},
		{sql: "ALTER TABLE orders ADD COLUMN delta bigint DEFAULT -1", path: Direct},
		{sql: "ALTER TABLE orders ADD COLUMN at timestamptz DEFAULT now()", path: Direct},
		{sql: "ALTER TABLE orders ADD COLUMN at2 timestamptz DEFAULT CURRENT_TIMESTAMP", path: Direct},
		{sql: "ALTER TABLE orders ADD COLUMN tags text[] DEFAULT '{}'::text[]", path: Direct},
		{sql: "ALTER TABLE s1.orders DROP COLUMN note", path: Direct, table: "orders"},
		{sql: "ALTER TABLE orders RENAME COLUMN a TO b", path: Direct, exec: InTransaction, table: "orders"},
		{sql: "ALTER TABLE orders RENAME TO orders2", path: Direct, table: "orders"},
		{sql: "ALTER TABLE orders RENAME CONSTRAINT c1 TO c2", path: Direct},
		{sql: "ALTER TABLE orders ADD CONSTRAINT qty_pos CHECK (qty > 0) NOT VALID", path: Direct, reasonHas: "NOT VALID"},
		{sql: "ALTER TABLE orders ADD CONSTRAINT fk FOREIGN KEY (c) REFERENCES customers (id) NOT VALID", path: Direct},
		{sql: "ALTER TABLE orders VALIDATE CONSTRAINT qty_pos", path: Direct},
		{sql: "ALTER TABLE orders ALTER COLUMN qty SET DEFAULT 1", path: Direct},
		{sql: "ALTER TABLE orders ALTER COLUMN qty DROP DEFAULT", path: Direct, reasonHas: "DROP DEFAULT"},
		{sql: "ALTER TABLE orders ALTER COLUMN qty DROP NOT NULL", path: Direct},
		{sql: "ALTER TABLE orders DROP CONSTRAINT qty_pos", path: Direct},
		{sql: "ALTER TABLE orders ADD CONSTRAINT u UNIQUE USING INDEX orders_u", path: Direct},
		{sql: "ALTER TABLE orders ALTER COLUMN email SET NOT NULL", facts: facts, path: Direct, reasonHas: "proves it"},
		{sql: "ALTER TABLE orders ALTER COLUMN name TYPE varchar(40)", facts: facts, path: Direct, reasonHas: "widening varchar(20) to varchar(40)"},
		{sql: "ALTER TABLE orders ALTER COLUMN name TYPE text", facts: facts, path: Direct},
		{sql: "ALTER TABLE orders ALTER COLUMN price TYPE numeric(12,2)", facts: facts, path: Direct},
		{sql: "CREATE INDEX CONCURRENTLY orders_qty ON orders (qty)", path: Direct, exec: CreateIndexConcurrently, table: "orders"},
		{sql: "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS orders_u ON s1.orders (qty)", path: Direct, exec: CreateIndexConcurrently},
		{sql: "DROP INDEX CONCURRENTLY orders_qty", path: Direct, exec: DropIndexConcurrently},
		{sql: "DROP INDEX s1.orders_qty", path: Direct, exec: InTransaction},
		// Shadow: rewrites and long ACCESS EXCLUSIVE.
		{sql: "ALTER TABLE orders ALTER COLUMN id TYPE bigint", facts: facts, path: Shadow, reasonHas: "rewrites"},
		{sql: "ALTER TABLE orders ALTER COLUMN id TYPE bigint", path: Shadow},
		{sql: "ALTER TABLE orders ALTER COLUMN name TYPE varchar(10)", facts: facts, path: Shadow},
		{sql: "ALTER TABLE orders ALTER COLUMN name TYPE varchar(40)", path: Shadow, reasonHas: "not proven"},
		{sql: "ALTER TABLE orders ALTER COLUMN price TYPE numeric(12,3)", facts: facts, path: Shadow},
		{sql: "ALTER TABLE orders ALTER COLUMN name TYPE text USING upper(name)", facts: facts, path: Shadow, reasonHas: "USING"},
		{sql: "ALTER TABLE orders ADD COLUMN r float8 DEFAULT random()", path: Shadow, reasonHas: "random()"},
		{sql: "ALTER TABLE orders ADD COLUMN u uuid DEFAULT gen_random_uuid()", path: Shadow},
		{sql: "ALTER TABLE orders ADD COLUMN seq bigserial", path: Shadow, reasonHas: "sequence"},
		{sql: "ALTER TABLE orders ADD COLUMN m mood DEFAULT 'ok'", path: Shadow, reasonHas: "domain"},
		{sql: "ALTER TABLE orders ADD COLUMN i int GENERATED ALWAYS AS IDENTITY", path: Shadow},
		{sql: "ALTER TABLE orders ADD COLUMN k int UNIQUE", path: Shadow},
		{sql: "ALTER TABLE orders ALTER COLUMN email SET NOT NULL", path: Shadow, reasonHas: "scans"},
		{sql: "ALTER TABLE orders ADD PRIMARY KEY (id)", path: Shadow},
		{sql: "ALTER TABLE orders ADD CONSTRAINT u UNIQUE (qty)", path: Shadow, reasonHas: "CONCURRENTLY"},
		{sql: "ALTER TABLE orders ADD CONSTRAINT qty_pos CHECK (qty > 0)", path: Shadow, reasonHas: "NOT VALID"},
		{sql: "ALTER TABLE orders SET TABLESPACE fast", path: Shadow},
		{sql: "CREATE INDEX orders_qty ON orders (qty)", path: Shadow, reasonHas: "CONCURRENTLY"},
		// A statement takes its most demanding change's path.
		{sql: "ALTER TABLE orders ADD COLUMN a int DEFAULT 0, ALTER COLUMN id TYPE bigint", path: Shadow},
		// Refused: not one table's schema change.
		{sql: "CREATE TABLE t (a int)", path: Refused, reasonHas: "router"},
		{sql: "DROP TABLE orders", path: Refused},
		{sql: "SELECT 1", path: Refused},
		{sql: "ALTER TABLE a ADD COLUMN x int; ALTER TABLE b ADD COLUMN y int", path: Refused, reasonHas: "exactly one"},
		{sql: "ALTER INDEX orders_qty RENAME TO orders_q", path: Refused},
		{sql: "ALTER VIEW v RENAME TO w", path: Refused},
		{sql: "CREATE INDEX CONCURRENTLY ON orders (qty)", path: Refused, reasonHas: "name"},
		{sql: "DROP INDEX CONCURRENTLY a, b", path: Refused},
		{sql: "ALTER TABLE orders ATTACH PARTITION p FOR VALUES IN (1)", path: Refused},
		{sql: "ALTER TABLE orders ADD COLUMN a int, ENABLE TRIGGER t", path: Refused},
	} {
		c, err := Classify(tc.sql, tc.facts)
		if err != nil {
			t.Errorf("%s: %v", tc.sql, err)
			continue
		}
		if c.Path != tc.path {
			t.Errorf("%s: path %s, want %s (%s)", tc.sql, c.Path, tc.path, c.Reason())
		}
		if tc.exec != "" && c.Execution != tc.exec {
			t.Errorf("%s: execution %s, want %s", tc.sql, c.Execution, tc.exec)
		}
		if tc.table != "" && c.Table != tc.table {
			t.Errorf("%s: table %q, want %q", tc.sql, c.Table, tc.table)
		}
		if len(c.Reasons) == 0 {
			t.Errorf("%s: no reason given", tc.sql)
		}
		if tc.reasonHas != "" && !strings.Contains(c.Reason(), tc.reasonHas) {
			t.Errorf("%s: reason %q lacks %q", tc.sql, c.Reason(), tc.reasonHas)
		}
	}
}

func TestClassifyNames(t *testing.T) {
	c, err := Classify("DROP INDEX CONCURRENTLY s1.orders_qty", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Index != "orders_qty" || c.IndexSchema != "s1" || c.Table != "" {
		t.Errorf("index %q schema %q table %q", c.Index, c.IndexSchema, c.Table)
	}
	c, err = Classify("ALTER TABLE s1.orders ADD COLUMN a int", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Schema != "s1" || c.Table != "orders" {
		t.Errorf("schema %q table %q", c.Schema, c.Table)
	}
	if _, err := Classify("ALTER TABLE orders ADD COLUMN", nil); err == nil {
		t.Error("a syntax error was classified")
	}
}
