package planner

import "github.com/tesseradb/tessera/topo/shardfunc"

// byteOrderSchema is what a Schema may also answer: whether a text or
// varchar column's values order by their bytes (UTF-8), which is what
// its collation does when it is C or POSIX (its own, or the database's
// default). Under any other collation the engine does not order text:
// only Postgres knows that order (a Go reimplementation could disagree
// with the shards' ICU or glibc), so such a statement is refused.
type byteOrderSchema interface {
	ByteOrdered(db, schema, table, column string) (bool, error)
}

// byteOrdered reports whether a column of the table is text or varchar
// under a C or POSIX collation.
func (c *planCtx) byteOrdered(table *tableRef, column string, t shardfunc.ColumnType) bool {
	if t != shardfunc.Text && t != shardfunc.Varchar {
		return false
	}
	bs, ok := c.schema.(byteOrderSchema)
	if !ok {
		return false
	}
	n := table.name
	yes, err := bs.ByteOrdered(n.Database, n.Schema, n.Table, column)
	if err != nil {
		c.noCache = true
		return false
	}
	return yes
}
