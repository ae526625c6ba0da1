package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// An UPDATE of a sharded table that assigns its shard-key column may move
// rows to other shards. The router runs it as three steps in one
// transaction (router/keymove.go): on the shards the WHERE reaches, the
// UPDATE itself, so that Postgres evaluates the SET expressions on the old
// rows and coerces them to the columns' types exactly as it would, with a
// RETURNING of every column and of where the new row version lies; then a
// DELETE of those row versions; then one INSERT of the returned rows,
// split by their new key over the shards they now belong to, with the
// client's RETURNING. Each row is updated once, by the first step: the
// rows the INSERT adds are not the UPDATE's to see.

// KeyMove is the plan of an UPDATE that changes a shard key.
type KeyMove struct {
	// Table is the table updated.
	Table TableName
	// Update is the UPDATE as the client wrote it, with RETURNING
	// replaced by tableoid, ctid and every column of the updated rows.
	Update string
	// Columns are the table's columns in order, as the Schema knew them
	// when planning; the router checks the shard's UPDATE returned these.
	Columns []string
	// InsertHead and InsertTail surround the VALUES rows of the INSERT
	// that puts the rows back: "INSERT INTO t AS x (cols) OVERRIDING
	// SYSTEM VALUE VALUES " and " RETURNING <client's list>" (or "").
	InsertHead, InsertTail string
	// Describe is an INSERT that inserts nothing and returns the client's
	// RETURNING row description, for an UPDATE that moved no row.
	Describe string
	// Returning reports a RETURNING clause; ReturningParams one that
	// holds parameters ($n), which the router's INSERT could not bind.
	Returning, ReturningParams bool
}

// keyMove plans an UPDATE of target that assigns its shard-key column, or
// refuses it with 0A000 where the three steps would not do exactly what
// Postgres does.
func (c *planCtx) keyMove(st *Statement, q *query, target *tableRef) {
	up := q.update
	p := target.place
	refuse := func(why string) {
		st.Err = unsupported("UPDATE of shard key column %s of %s %s is not supported yet", p.ShardColumn(), target.name, why)
	}
	switch {
	case len(p.Alternates) > 0:
		refuse("(a table with alternate shard indexes)")
		return
	case len(up.FromClause) > 0:
		refuse("with FROM")
		return
	case up.WithClause != nil:
		refuse("with WITH")
		return
	case !up.Relation.Inh:
		refuse("with ONLY")
		return
	}
	for _, n := range up.TargetList {
		rt := n.GetResTarget()
		switch {
		case rt == nil:
			refuse("with this SET list")
			return
		case len(rt.Indirection) > 0:
			refuse("with a SET of a subscript or field")
			return
		case rt.Val.GetMultiAssignRef() != nil:
			refuse("with a SET of several columns at once")
			return
		case rt.Val.GetSetToDefault() != nil:
			refuse("with SET ... = DEFAULT")
			return
		}
	}
	current := false
	walk(up.ProtoReflect(), func(m proto.Message) bool {
		if _, ok := m.(*pg_query.CurrentOfExpr); ok {
			current = true
		}
		return !current
	})
	if current {
		refuse("with WHERE CURRENT OF")
		return
	}
	cols, err := c.columnNames(target.name)
	if err != nil {
		st.Err = err
		return
	}
	ref := target.qualifier()

	// The UPDATE, returning where each new row version lies and its
	// columns.
	u := proto.Clone(up).(*pg_query.UpdateStmt)
	u.ReturningList = []*pg_query.Node{
		resTarget(colRef(ref, "tableoid")),
		resTarget(colRef(ref, "ctid")),
		resTarget(&pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: &pg_query.ColumnRef{Fields: []*pg_query.Node{
			pg_query.MakeStrNode(ref), {Node: &pg_query.Node_AStar{AStar: &pg_query.A_Star{}}}}}}}),
	}
	update, err := c.deparse(&pg_query.Node{Node: &pg_query.Node_UpdateStmt{UpdateStmt: u}})
	if err != nil {
		st.Err = err
		return
	}

	// The INSERT that puts the rows back, with one row of NULLs where the
	// router's rows go.
	var colNodes, nulls []*pg_query.Node
	for _, col := range cols {
		colNodes = append(colNodes, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Name: col}}})
		nulls = append(nulls, &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{Isnull: true}}})
	}
	rel := proto.Clone(up.Relation).(*pg_query.RangeVar)
	ins := &pg_query.InsertStmt{
		Relation:      rel,
		Cols:          colNodes,
		Override:      pg_query.OverridingKind_OVERRIDING_SYSTEM_VALUE,
		ReturningList: up.ReturningList,
		SelectStmt: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
			ValuesLists: []*pg_query.Node{{Node: &pg_query.Node_List{List: &pg_query.List{Items: nulls}}}},
		}}},
	}
	insert, err := c.deparse(&pg_query.Node{Node: &pg_query.Node_InsertStmt{InsertStmt: ins}})
	if err != nil {
		st.Err = err
		return
	}
	spans, err := rowSpans(insert, 1)
	if err != nil {
		st.Err = err
		return
	}

	// The INSERT that inserts nothing: its rows are the table's own,
	// under WHERE false, so that their types are the columns' types.
	plain := proto.Clone(up.Relation).(*pg_query.RangeVar)
	plain.Alias, plain.Inh = nil, true
	var selCols []*pg_query.Node
	for _, col := range cols {
		selCols = append(selCols, resTarget(colRef(col)))
	}
	ins.SelectStmt = &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
		TargetList:  selCols,
		FromClause:  []*pg_query.Node{{Node: &pg_query.Node_RangeVar{RangeVar: plain}}},
		WhereClause: &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{Val: &pg_query.A_Const_Boolval{Boolval: &pg_query.Boolean{Boolval: false}}}}},
	}}}
	describe, err := c.deparse(&pg_query.Node{Node: &pg_query.Node_InsertStmt{InsertStmt: ins}})
	if err != nil {
		st.Err = err
		return
	}

	params := false
	for _, n := range up.ReturningList {
		walk(n.ProtoReflect(), func(m proto.Message) bool {
			if _, ok := m.(*pg_query.ParamRef); ok {
				params = true
			}
			return !params
		})
	}
	st.KeyMove = &KeyMove{
		Table:           target.name,
		Update:          update,
		Columns:         cols,
		InsertHead:      insert[:spans[0][0]],
		InsertTail:      insert[spans[0][1]:],
		Describe:        describe,
		Returning:       len(up.ReturningList) > 0,
		ReturningParams: params,
	}
	// The plan holds the statement's literals.
	c.exact = true
}

// setsShardKey reports whether an UPDATE's SET list assigns target's
// shard-key column.
func setsShardKey(sets []*pg_query.Node, target *tableRef) bool {
	key := target.place.ShardColumn()
	for _, n := range sets {
		if rt := n.GetResTarget(); rt != nil && rt.Name == key {
			return true
		}
	}
	return false
}

func (c *planCtx) deparse(n *pg_query.Node) (string, error) {
	sql, err := pg_query.Deparse(&pg_query.ParseResult{Version: c.version, Stmts: []*pg_query.RawStmt{{Stmt: n}}})
	if err != nil {
		return "", unsupported("could not write the statement for the shards: %v", err)
	}
	return sql, nil
}

func resTarget(val *pg_query.Node) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Val: val}}}
}

func colRef(names ...string) *pg_query.Node {
	var fields []*pg_query.Node
	for _, n := range names {
		fields = append(fields, pg_query.MakeStrNode(n))
	}
	return &pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: &pg_query.ColumnRef{Fields: fields}}}
}
