package ddl

import (
	"testing"
)

// FuzzClassify: whatever text an operator or a client sends, Classify
// answers a known path with a reason or an error, and never panics.
func FuzzClassify(f *testing.F) {
	for _, seed := range []string{
		"ALTER TABLE t ADD COLUMN c int NOT NULL DEFAULT 0",
		"ALTER TABLE t ALTER COLUMN id TYPE bigint",
		"ALTER TABLE t ALTER COLUMN v TYPE varchar(40)",
		"CREATE INDEX CONCURRENTLY i ON t (a)",
		"DROP INDEX CONCURRENTLY i",
		"ALTER TABLE t ADD CONSTRAINT c CHECK (a > 0) NOT VALID; SELECT 1",
		"ALTER TABLE t RENAME TO u",
		"SELECT 1",
		"",
		"ALTER TABLE",
	} {
		f.Add(seed)
	}
	facts := &TableFacts{ColumnTypes: map[string]string{"v": "character varying(20)", "id": "integer"}, ProvenNotNull: map[string]bool{"a": true}}
	f.Fuzz(func(t *testing.T, sql string) {
		c, err := Classify(sql, facts)
		if err != nil {
			return
		}
		switch c.Path {
		case Direct, Shadow, Refused:
		default:
			t.Fatalf("Classify(%q) gave path %q", sql, c.Path)
		}
	})
}
