package planner

import "github.com/tesseradb/tessera/topo/shardfunc"

// TextCollation is what the catalog says of a text or varchar column's
// collation (its own, or the database's default).
type TextCollation struct {
	// ByteOrder: C or POSIX (libc) in a UTF8 database, which orders
	// values by the bytes of their UTF-8 encoding.
	ByteOrder bool
	// Nondeterministic: an ICU collation under which values of other
	// bytes may be equal ('a' = 'A' case-insensitively).
	Nondeterministic bool
}

// collationSchema is what a Schema may also answer: a column's collation
// (the router's catalog cache does). Under any collation but C the
// engine does not order text: only Postgres knows that order (a Go
// reimplementation could disagree with the shards' ICU or glibc), so such
// a statement is refused; and text is grouped by its bytes only under a
// deterministic collation. A Schema that does not answer (the planner's
// own tests) has every text column deterministic and not byte-ordered.
type collationSchema interface {
	TextCollation(db, schema, table, column string) (TextCollation, error)
}

// textCollation asks the catalog about a text or varchar column; ok is
// false for other types, or when the catalog cannot say.
func (c *planCtx) textCollation(table *tableRef, column string, t shardfunc.ColumnType) (TextCollation, bool) {
	if t != shardfunc.Text && t != shardfunc.Varchar {
		return TextCollation{}, false
	}
	cs, ok := c.schema.(collationSchema)
	if !ok {
		return TextCollation{}, false
	}
	n := table.name
	coll, err := cs.TextCollation(n.Database, n.Schema, n.Table, column)
	if err != nil {
		c.noCache = true
		return TextCollation{}, false
	}
	return coll, true
}

// byteOrdered reports whether a column of the table is text or varchar
// under a C or POSIX collation.
func (c *planCtx) byteOrdered(table *tableRef, column string, t shardfunc.ColumnType) bool {
	coll, ok := c.textCollation(table, column, t)
	return ok && coll.ByteOrder
}

// groupable reports whether values of a table column are equal in
// Postgres exactly when their encodings are (equalByBytes), its
// collation included: text and varchar under a nondeterministic
// collation are not.
func (c *planCtx) groupable(table *tableRef, column string, t shardfunc.ColumnType) bool {
	if !equalByBytes(t) {
		return false
	}
	coll, ok := c.textCollation(table, column, t)
	return !ok || !coll.Nondeterministic
}
