package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// CREATE TABLE AS and SELECT INTO make an unsharded table from a query.
// The table is placed as any new table: by the topology's defaults, which
// must put it in a single-shard group (the authoritative one, usually),
// and every table the query reads must live on that group's shard. The
// statement runs there with its rows; every other shard runs it WITH NO
// DATA (Statement.Elsewhere), so that, as with CREATE TABLE, the table
// exists on every shard, and its rows only where its group is. A
// temporary table is made on the authoritative shard alone, in the
// session's backend.

// planCreateTableAs plans CREATE TABLE AS (or SELECT INTO, whose query is
// given without its INTO) into st.
func (c *planCtx) planCreateTableAs(st *Statement, into *pg_query.IntoClause, query *pg_query.Node, f *facts) {
	inner := &Statement{}
	c.dispatch(inner, query, f)
	st.Kind, st.Tables, st.Creates = DDL, inner.Tables, into.GetRel().GetRelname()
	st.SessionState |= inner.SessionState
	if inner.Err != nil {
		st.Err = inner.Err
		return
	}
	target, err := c.resolve(into.Rel)
	if err != nil {
		st.Err = err
		return
	}
	if target.catalog || target.place.IsReference() || !target.place.Group.SingleShard() {
		st.Err = unsupported("CREATE TABLE AS of a table that is not in a single-shard group is not supported yet (%s)", target.name)
		return
	}
	shard := target.place.Group.KeyRanges[0].ShardUID
	if inner.Route != Authoritative || len(inner.Tables) > 0 && inner.Targets[0] != shard {
		st.Err = unsupported("CREATE TABLE AS reading tables that are not on shard %s, where %s is placed, is not supported yet", shard, target.name)
		return
	}
	st.Route, st.Targets = Authoritative, []string{shard}
	if into.Rel.Relpersistence == "t" {
		st.SessionState |= TempTable
		return
	}
	if inner.SessionState&Prepared != 0 {
		// CREATE TABLE AS EXECUTE: the statement is prepared in the
		// session's backend on the authoritative shard only, and so the
		// table is made there only; the session follows it as it follows
		// its temporary tables (router/follow.go).
		return
	}
	if hasParams(query) {
		st.Err = unsupported("CREATE TABLE AS with parameters is not supported yet")
		return
	}
	elsewhere, err := withoutData(c.raw, c.version)
	if err != nil {
		st.Err = unsupported("CREATE TABLE AS: %v", err)
		return
	}
	st.Route, st.Elsewhere = Everywhere, elsewhere
	st.Targets = append(st.Targets, without(c.top.Shards(), shard)...)
}

// topSelectInto reports whether sel is the statement being planned (or
// the one its EXPLAIN explains): only there is SELECT INTO allowed.
func (c *planCtx) topSelectInto(sel *pg_query.SelectStmt) bool {
	s := c.raw.GetStmt()
	return s.GetSelectStmt() == sel || s.GetExplainStmt().GetQuery().GetSelectStmt() == sel
}

// withoutData deparses raw, a CREATE TABLE AS or SELECT INTO (perhaps
// under EXPLAIN), as CREATE TABLE AS ... WITH NO DATA.
func withoutData(raw *pg_query.RawStmt, version int32) (string, error) {
	stmt := proto.Clone(raw.GetStmt()).(*pg_query.Node)
	holder := stmt
	if ex := stmt.GetExplainStmt(); ex != nil {
		holder = ex.Query
	}
	switch x := holder.GetNode().(type) {
	case *pg_query.Node_CreateTableAsStmt:
		x.CreateTableAsStmt.Into.SkipData = true
	case *pg_query.Node_SelectStmt:
		into := x.SelectStmt.IntoClause
		x.SelectStmt.IntoClause = nil
		into.SkipData = true
		holder.Node = &pg_query.Node_CreateTableAsStmt{CreateTableAsStmt: &pg_query.CreateTableAsStmt{
			Query: &pg_query.Node{Node: x}, Into: into, Objtype: pg_query.ObjectType_OBJECT_TABLE}}
	}
	return pg_query.Deparse(&pg_query.ParseResult{Version: version, Stmts: []*pg_query.RawStmt{{Stmt: stmt}}})
}

// hasInto reports a SELECT INTO anywhere under n.
func hasInto(n *pg_query.Node) bool {
	found := false
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if _, ok := m.(*pg_query.IntoClause); ok {
			found = true
		}
		return !found
	})
	return found
}

// hasParams reports a $n anywhere under n.
func hasParams(n *pg_query.Node) bool {
	found := false
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if _, ok := m.(*pg_query.ParamRef); ok {
			found = true
		}
		return !found
	})
	return found
}

// without returns list without s.
func without(list []string, s string) []string {
	out := make([]string, 0, len(list))
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}
