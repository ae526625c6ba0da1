package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// DDL runs on every shard of the topology: a table must exist wherever its
// group might move it, and types, functions, schemas and roles are needed
// wherever a table uses them. (Sending it only to the shards of the groups
// involved plus the authoritative shard would be leaner, but every shard is
// simple and always right.)

// planUtility plans everything but queries, EXPLAIN, COPY, transaction
// control, SET and SHOW.
func (c *planCtx) planUtility(st *Statement, n *pg_query.Node, f *facts) {
	st.Kind = Utility
	c.authoritative(st)
	refs, err := c.resolveTables(f, nil)
	if err == nil {
		ds := n.GetDropStmt()
		refs, err = c.namedRelations(ds.GetRemoveType(), ds.GetObjects(), refs)
	}
	if cs := n.GetCommentStmt(); err == nil && cs != nil {
		refs, err = c.namedRelations(cs.Objtype, []*pg_query.Node{cs.Object}, refs)
	}
	st.Tables, st.Err = tableNames(refs), err
	if n.GetCallStmt() != nil {
		c.checkFunctions(st, f) // a procedure's body: functions.go
	}
	switch x := n.GetNode().(type) {
	case *pg_query.Node_DoStmt:
		c.checkDo(st, x.DoStmt)
	case *pg_query.Node_CreateStmt:
		c.ddl(st, x.CreateStmt.Relation, false)
	case *pg_query.Node_ViewStmt:
		c.ddl(st, x.ViewStmt.View, false)
		if st.Err == nil {
			st.Err = c.viewReadsElsewhere(x.ViewStmt.View, refs)
		}
	case *pg_query.Node_CreateSeqStmt:
		c.ddl(st, x.CreateSeqStmt.Sequence, false)
	case *pg_query.Node_IndexStmt:
		c.ddl(st, nil, x.IndexStmt.Concurrent)
		st.Creates = x.IndexStmt.Idxname
	case *pg_query.Node_DropStmt:
		c.ddl(st, nil, x.DropStmt.Concurrent)
		st.Drops = len(st.Tables) > 0
		if st.Drops && !x.DropStmt.MissingOk && st.Err == nil {
			c.dropElsewhere(st)
		}
	case *pg_query.Node_RenameStmt:
		c.ddl(st, nil, false)
		if x.RenameStmt.Relation != nil && x.RenameStmt.Subname == "" {
			// ALTER TABLE, INDEX, VIEW or SEQUENCE ... RENAME TO
			st.Creates = x.RenameStmt.Newname
		}
	case *pg_query.Node_CreatedbStmt, *pg_query.Node_DropdbStmt,
		*pg_query.Node_CreateTableSpaceStmt, *pg_query.Node_DropTableSpaceStmt:
		c.ddl(st, nil, true)
	case *pg_query.Node_CreateTableAsStmt:
		st.Kind = DDL
		if x.CreateTableAsStmt.Objtype == pg_query.ObjectType_OBJECT_MATVIEW {
			st.Err = unsupported("CREATE MATERIALIZED VIEW is not supported yet")
		} else {
			c.planCreateTableAs(st, x.CreateTableAsStmt.Into, x.CreateTableAsStmt.Query, f)
		}
	case *pg_query.Node_TruncateStmt, *pg_query.Node_LockStmt, *pg_query.Node_ClusterStmt:
		c.onTables(st, refs, false)
	case *pg_query.Node_VacuumStmt:
		c.onTables(st, refs, x.VacuumStmt.IsVacuumcmd)
	case *pg_query.Node_ReindexStmt:
		r := x.ReindexStmt
		c.onTables(st, refs, hasOption(r.Params, "concurrently") ||
			r.Kind == pg_query.ReindexObjectType_REINDEX_OBJECT_DATABASE ||
			r.Kind == pg_query.ReindexObjectType_REINDEX_OBJECT_SYSTEM)
	case *pg_query.Node_CheckPointStmt:
		st.Route, st.Targets = Everywhere, c.everyShard()
	case *pg_query.Node_AlterSystemStmt:
		st.Route, st.Targets, st.NoTransaction = Everywhere, c.everyShard(), true
	case *pg_query.Node_ListenStmt, *pg_query.Node_UnlistenStmt:
		// NOTIFY goes to the authoritative shard too, so listeners
		// there hear it.
		st.SessionState |= Listen
	case *pg_query.Node_LoadStmt:
		st.SessionState |= Load
	case *pg_query.Node_PrepareStmt:
		c.planPrepare(st, x.PrepareStmt, f)
	case *pg_query.Node_ExecuteStmt:
		st.Name, st.SessionState = x.ExecuteStmt.Name, st.SessionState|Prepared
	case *pg_query.Node_DeallocateStmt:
		st.Name, st.SessionState, st.Deallocates = x.DeallocateStmt.Name, st.SessionState|Prepared, true
	case *pg_query.Node_DeclareCursorStmt:
		c.planDeclare(st, x.DeclareCursorStmt, f)
	case *pg_query.Node_FetchStmt:
		st.Name, st.Route, st.Targets = x.FetchStmt.Portalname, Router, nil
	case *pg_query.Node_ClosePortalStmt:
		st.Name, st.Route, st.Targets = x.ClosePortalStmt.Portalname, Router, nil
	case *pg_query.Node_DiscardStmt:
		st.Route, st.Targets = Router, nil
		st.Deallocates = x.DiscardStmt.Target == pg_query.DiscardMode_DISCARD_ALL
	case *pg_query.Node_ConstraintsSetStmt:
		st.Route, st.Targets = Router, nil
	default:
		if isDDL(n) {
			c.ddl(st, nil, false)
		}
		// Anything else (DO, CALL, NOTIFY, ...) runs on the
		// authoritative shard.
	}
}

// ddl makes st DDL that runs on every shard, unless it creates a temporary
// object: that lives in one backend session, on the authoritative shard.
func (c *planCtx) ddl(st *Statement, created *pg_query.RangeVar, noTransaction bool) {
	st.Kind, st.NoTransaction = DDL, noTransaction
	st.Creates = created.GetRelname()
	if created.GetRelpersistence() == "t" {
		st.SessionState |= TempTable
		return
	}
	st.Route, st.Targets = Everywhere, c.everyShard()
}

// everyShard lists every shard of the topology, the authoritative one
// first: its answer is the one the client gets, and the relations only it
// has (made by a function, a DO block or CREATE TABLE AS) are there.
func (c *planCtx) everyShard() []string {
	auth := c.top.AuthoritativeShard()
	return append([]string{auth}, without(c.top.Shards(), auth)...)
}

// onTables runs TRUNCATE, LOCK, VACUUM, ANALYZE, CLUSTER or REINDEX on
// the shards of the tables it names, or on every shard if it names none
// (or only catalogs).
func (c *planCtx) onTables(st *Statement, refs []*tableRef, noTransaction bool) {
	st.Route, st.Targets, st.NoTransaction = Everywhere, tableShards(refs), noTransaction
	if len(st.Targets) == 0 {
		st.Targets = c.top.Shards()
	}
}

// planPrepare routes SQL-level PREPARE. EXECUTE names only the prepared
// statement, so the router cannot route it by value: PREPARE is allowed for
// statements that run on the authoritative shard, where EXECUTE goes.
func (c *planCtx) planPrepare(st *Statement, ps *pg_query.PrepareStmt, f *facts) {
	st.Name, st.SessionState = ps.Name, st.SessionState|Prepared
	inner := &Statement{}
	c.dispatch(inner, ps.Query, f)
	st.Tables = inner.Tables
	switch {
	case inner.Err != nil:
		st.Err = inner.Err
	case inner.Route != Authoritative || inner.Targets[0] != c.top.AuthoritativeShard():
		st.Err = unsupported("PREPARE of a statement that does not run on the authoritative shard is not supported yet (use the extended query protocol)")
	}
}

// planDeclare routes a cursor like its query, which must reach one shard:
// FETCH then goes wherever the cursor was declared.
func (c *planCtx) planDeclare(st *Statement, dc *pg_query.DeclareCursorStmt, f *facts) {
	const cursorOptHold = 0x0020 // CURSOR_OPT_HOLD in parsenodes.h
	c.dispatch(st, dc.Query, f)
	st.Kind, st.Name, st.Declares = Utility, dc.Portalname, true
	if dc.Options&cursorOptHold != 0 {
		st.SessionState |= HoldCursor
	}
	several := unsupported("a cursor over several shards is not supported yet")
	switch st.Route {
	case Scatter, Everywhere:
		if st.Err == nil {
			st.Err = several
		}
	case Shard:
		st.multiShard = several
	}
}

// namedRelations adds the relations a DROP or COMMENT names (as name
// lists, not RangeVars) to refs.
func (c *planCtx) namedRelations(kind pg_query.ObjectType, objects []*pg_query.Node, refs []*tableRef) ([]*tableRef, error) {
	switch kind {
	case pg_query.ObjectType_OBJECT_TABLE, pg_query.ObjectType_OBJECT_VIEW, pg_query.ObjectType_OBJECT_MATVIEW,
		pg_query.ObjectType_OBJECT_INDEX, pg_query.ObjectType_OBJECT_SEQUENCE, pg_query.ObjectType_OBJECT_FOREIGN_TABLE:
	default:
		return refs, nil
	}
	for _, o := range objects {
		var parts []string
		for _, p := range o.GetList().GetItems() {
			parts = append(parts, p.GetString_().GetSval())
		}
		rv := &pg_query.RangeVar{}
		switch len(parts) {
		case 1:
			rv.Relname = parts[0]
		case 2:
			rv.Schemaname, rv.Relname = parts[0], parts[1]
		case 3:
			rv.Catalogname, rv.Schemaname, rv.Relname = parts[0], parts[1], parts[2]
		default:
			continue
		}
		r, err := c.resolve(rv)
		if err != nil {
			return nil, err
		}
		refs = append(refs, r)
	}
	return refs, nil
}

func hasOption(opts []*pg_query.Node, name string) bool {
	for _, o := range opts {
		if o.GetDefElem().GetDefname() == name {
			return true
		}
	}
	return false
}

// isDDL reports the statements that define or change schema objects,
// privileges, roles and databases.
func isDDL(n *pg_query.Node) bool {
	switch n.GetNode().(type) {
	case *pg_query.Node_CreateSchemaStmt, *pg_query.Node_AlterTableStmt, *pg_query.Node_AlterCollationStmt,
		*pg_query.Node_AlterDomainStmt, *pg_query.Node_GrantStmt, *pg_query.Node_GrantRoleStmt,
		*pg_query.Node_AlterDefaultPrivilegesStmt, *pg_query.Node_AlterTableSpaceOptionsStmt,
		*pg_query.Node_AlterTableMoveAllStmt, *pg_query.Node_CreateExtensionStmt, *pg_query.Node_AlterExtensionStmt,
		*pg_query.Node_AlterExtensionContentsStmt, *pg_query.Node_CreateFdwStmt, *pg_query.Node_AlterFdwStmt,
		*pg_query.Node_CreateForeignServerStmt, *pg_query.Node_AlterForeignServerStmt,
		*pg_query.Node_CreateForeignTableStmt, *pg_query.Node_CreateUserMappingStmt,
		*pg_query.Node_AlterUserMappingStmt, *pg_query.Node_DropUserMappingStmt,
		*pg_query.Node_ImportForeignSchemaStmt, *pg_query.Node_CreatePolicyStmt, *pg_query.Node_AlterPolicyStmt,
		*pg_query.Node_CreateAmStmt, *pg_query.Node_CreateTrigStmt, *pg_query.Node_CreateEventTrigStmt,
		*pg_query.Node_AlterEventTrigStmt, *pg_query.Node_CreatePlangStmt, *pg_query.Node_CreateRoleStmt,
		*pg_query.Node_AlterRoleStmt, *pg_query.Node_AlterRoleSetStmt, *pg_query.Node_DropRoleStmt,
		*pg_query.Node_AlterSeqStmt, *pg_query.Node_DefineStmt, *pg_query.Node_CreateDomainStmt,
		*pg_query.Node_CreateOpClassStmt, *pg_query.Node_CreateOpFamilyStmt, *pg_query.Node_AlterOpFamilyStmt,
		*pg_query.Node_CommentStmt, *pg_query.Node_SecLabelStmt, *pg_query.Node_CreateStatsStmt,
		*pg_query.Node_AlterStatsStmt, *pg_query.Node_CreateFunctionStmt, *pg_query.Node_AlterFunctionStmt,
		*pg_query.Node_RenameStmt, *pg_query.Node_AlterObjectDependsStmt, *pg_query.Node_AlterObjectSchemaStmt,
		*pg_query.Node_AlterOwnerStmt, *pg_query.Node_AlterOperatorStmt, *pg_query.Node_AlterTypeStmt,
		*pg_query.Node_RuleStmt, *pg_query.Node_CompositeTypeStmt, *pg_query.Node_CreateEnumStmt,
		*pg_query.Node_CreateRangeStmt, *pg_query.Node_AlterEnumStmt, *pg_query.Node_AlterDatabaseStmt,
		*pg_query.Node_AlterDatabaseRefreshCollStmt, *pg_query.Node_AlterDatabaseSetStmt,
		*pg_query.Node_RefreshMatViewStmt, *pg_query.Node_CreateConversionStmt, *pg_query.Node_CreateCastStmt,
		*pg_query.Node_CreateTransformStmt, *pg_query.Node_DropOwnedStmt, *pg_query.Node_ReassignOwnedStmt,
		*pg_query.Node_AlterTsdictionaryStmt, *pg_query.Node_AlterTsconfigurationStmt,
		*pg_query.Node_CreatePublicationStmt, *pg_query.Node_AlterPublicationStmt,
		*pg_query.Node_CreateSubscriptionStmt, *pg_query.Node_AlterSubscriptionStmt,
		*pg_query.Node_DropSubscriptionStmt:
		return true
	}
	return false
}

// dropElsewhere makes a DROP of relations run with IF EXISTS on every
// shard but the authoritative one, which runs it as written: a relation
// made there alone (by a function or a DO block, which the router cannot
// see into) is dropped without an error from shards that never had it.
func (c *planCtx) dropElsewhere(st *Statement) {
	stmt := proto.Clone(c.raw.GetStmt()).(*pg_query.Node)
	stmt.GetDropStmt().MissingOk = true
	sql, err := pg_query.Deparse(&pg_query.ParseResult{Version: c.version, Stmts: []*pg_query.RawStmt{{Stmt: stmt}}})
	if err == nil {
		st.Elsewhere = sql
	}
}
