package planner

import (
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router/copysplit"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// CopyInto is the plan of COPY table [(columns)] FROM STDIN into a sharded
// table: the router opens the COPY on every shard of the table's group
// (Targets), splits the client's rows by shard key (package copysplit)
// and commits the shards' parts together.
type CopyInto struct {
	Table     TableName
	Placement *topo.Placement
	// KeyType is the shard-key column's type, as it routes.
	KeyType shardfunc.ColumnType
	// Options are how the rows are read.
	Options copysplit.Options
	// OptionsErr: an option the splitter cannot follow. Postgres judges
	// the options first (the router opens the COPY on the shards before
	// it reads a row), and only options it accepts are refused with this.
	OptionsErr error
}

// copyInto plans COPY FROM STDIN into the sharded table target.
func (c *planCtx) copyInto(st *Statement, cs *pg_query.CopyStmt, target *tableRef) {
	p, name := target.place, target.name
	if len(p.Alternates) > 0 {
		st.Err = unsupported("COPY into sharded table %s, which has alternate shard indexes, is not supported yet", name)
		return
	}
	if cs.WhereClause != nil {
		st.Err = unsupported("COPY ... FROM ... WHERE into sharded table %s is not supported yet", name)
		return
	}
	column := p.ShardColumn()
	var cols []string
	for _, n := range cs.Attlist {
		cols = append(cols, n.GetString_().GetSval())
	}
	if len(cols) == 0 {
		names, err := c.columnNames(name)
		if err != nil {
			st.Err = err
			return
		}
		cols = names
	}
	key := slices.Index(cols, column)
	if key < 0 {
		st.Err = unsupported("COPY into sharded table %s must list its shard key column %s (a key left to its default, a sequence say, is not supported yet)", name, column)
		return
	}
	typ, err := c.columnType(name, column)
	if err != nil {
		st.Err = err
		return
	}
	ci := &CopyInto{Table: name, Placement: p, KeyType: typ}
	ci.Options, ci.OptionsErr = copyOptions(cs.Options, column)
	ci.Options.Columns, ci.Options.Key = len(cols), key
	st.CopyInto = ci
	st.Route, st.Group, st.Placement = Scatter, p.Group.UID, p
	st.Targets = p.Group.Shards()
	// The options' literals shape the plan.
	c.exact = true
}

// copyOptions reads COPY's options as Postgres's ProcessCopyOptions does,
// as far as reading rows needs. Options Postgres refuses are left for
// Postgres to refuse.
func copyOptions(opts []*pg_query.Node, keyColumn string) (copysplit.Options, error) {
	var o copysplit.Options
	var delimiterSet, nullSet, quoteSet, escapeSet bool
	var err error
	refuse := func(format string, args ...any) {
		if err == nil {
			err = pgerr.New(pgerr.FeatureNotSupported, format, args...)
		}
	}
	single := func(name string, v string) byte {
		if len(v) != 1 || v[0] == '\r' || v[0] == '\n' {
			refuse("COPY %s %q into a sharded table is not supported", name, v)
			return 0
		}
		return v[0]
	}
	for _, n := range opts {
		d := n.GetDefElem()
		if d == nil {
			continue
		}
		v := optionString(d.Arg)
		switch strings.ToLower(d.Defname) {
		case "format":
			switch strings.ToLower(v) {
			case "csv":
				o.Format = copysplit.CSV
			case "binary":
				o.Format = copysplit.Binary
			}
		case "delimiter":
			o.Delimiter, delimiterSet = single("DELIMITER", v), true
		case "null":
			o.Null, nullSet = v, true
		case "quote":
			o.Quote, quoteSet = single("QUOTE", v), true
		case "escape":
			o.Escape, escapeSet = single("ESCAPE", v), true
		case "header":
			switch strings.ToLower(v) {
			case "", "true", "on", "1", "match":
				o.Header = true
			}
		case "force_not_null":
			o.ForceNotNull = o.ForceNotNull || namesColumn(d.Arg, keyColumn)
		case "force_null":
			o.ForceNull = o.ForceNull || namesColumn(d.Arg, keyColumn)
		case "encoding":
			if e := strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(v)); e != "utf8" && e != "unicode" {
				refuse("COPY ENCODING %q into a sharded table is not supported (send UTF8)", v)
			}
		case "freeze", "force_quote", "oids":
			// No bearing on where a row ends or what its key is
			// (Postgres refuses the last two in COPY FROM).
		default:
			refuse("COPY option %s into a sharded table is not supported yet", d.Defname)
		}
	}
	o.Defaults(delimiterSet, nullSet, quoteSet, escapeSet)
	return o, err
}

// optionString is an option's value as text: "" for none.
func optionString(n *pg_query.Node) string {
	switch {
	case n == nil:
		return ""
	case n.GetString_() != nil:
		return n.GetString_().GetSval()
	case n.GetBoolean() != nil:
		if n.GetBoolean().GetBoolval() {
			return "true"
		}
		return "false"
	case n.GetInteger() != nil:
		if n.GetInteger().GetIval() != 0 {
			return "1"
		}
		return "0"
	}
	return "?"
}

// namesColumn reports whether a FORCE_NULL or FORCE_NOT_NULL list names
// column (or is *).
func namesColumn(n *pg_query.Node, column string) bool {
	if n.GetAStar() != nil {
		return true
	}
	for _, item := range n.GetList().GetItems() {
		if item.GetString_().GetSval() == column || item.GetAStar() != nil {
			return true
		}
	}
	return false
}
