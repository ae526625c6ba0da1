package planner

import (
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// Transaction control and session settings: the router coordinates these
// itself across the backends a session uses, so they take the Router
// route.

func planTransaction(st *Statement, ts *pg_query.TransactionStmt) {
	st.Kind, st.Route = Transaction, Router
	switch ts.Kind {
	case pg_query.TransactionStmtKind_TRANS_STMT_BEGIN, pg_query.TransactionStmtKind_TRANS_STMT_START:
		st.Transaction = Begin
	case pg_query.TransactionStmtKind_TRANS_STMT_COMMIT:
		st.Transaction = Commit
	case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK:
		st.Transaction = Rollback
	case pg_query.TransactionStmtKind_TRANS_STMT_SAVEPOINT:
		st.Transaction, st.Name = Savepoint, ts.SavepointName
	case pg_query.TransactionStmtKind_TRANS_STMT_RELEASE:
		st.Transaction, st.Name = Release, ts.SavepointName
	case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
		st.Transaction, st.Name = RollbackTo, ts.SavepointName
	case pg_query.TransactionStmtKind_TRANS_STMT_PREPARE:
		st.Transaction, st.Name = PrepareTransaction, ts.Gid
	case pg_query.TransactionStmtKind_TRANS_STMT_COMMIT_PREPARED:
		st.Transaction, st.Name, st.NoTransaction = CommitPrepared, ts.Gid, true
	case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED:
		st.Transaction, st.Name, st.NoTransaction = RollbackPrepared, ts.Gid, true
	}
}

func (c *planCtx) planSet(st *Statement, vs *pg_query.VariableSetStmt) {
	st.Kind, st.Route = Set, Router
	s := &Setting{Name: vs.Name, Local: vs.IsLocal}
	switch vs.Kind {
	case pg_query.VariableSetKind_VAR_SET_MULTI:
		if vs.Name != "SESSION CHARACTERISTICS" {
			// SET TRANSACTION ..., SET TRANSACTION SNAPSHOT ...
			st.Kind, st.Transaction = Transaction, SetTransaction
			return
		}
		s.Op, s.Name = SetSessionCharacteristics, ""
	case pg_query.VariableSetKind_VAR_SET_VALUE:
		s.Op = SetValue
		var vals []string
		for _, a := range vs.Args {
			vals = append(vals, constText(a))
		}
		s.Value = strings.Join(vals, ", ")
		// The plan now holds literal values: cache it by exact text.
		c.exact = true
	case pg_query.VariableSetKind_VAR_SET_DEFAULT, pg_query.VariableSetKind_VAR_RESET:
		s.Op = Reset
	case pg_query.VariableSetKind_VAR_SET_CURRENT:
		s.Op = SetFromCurrent
	case pg_query.VariableSetKind_VAR_RESET_ALL:
		s.Op = ResetAll
	}
	st.Setting = s
}

// constText is the text of a constant SET argument, possibly cast (SET
// TIME ZONE INTERVAL '+02:00' HOUR TO MINUTE).
func constText(n *pg_query.Node) string {
	if tc := n.GetTypeCast(); tc != nil {
		n = tc.Arg
	}
	switch v := n.GetAConst().GetVal().(type) {
	case *pg_query.A_Const_Sval:
		return v.Sval.GetSval()
	case *pg_query.A_Const_Ival:
		return strconv.Itoa(int(v.Ival.GetIval()))
	case *pg_query.A_Const_Fval:
		return v.Fval.GetFval()
	case *pg_query.A_Const_Boolval:
		return strconv.FormatBool(v.Boolval.GetBoolval())
	case *pg_query.A_Const_Bsval:
		return v.Bsval.GetBsval()
	}
	return ""
}

// planSetConfig plans a SELECT calling set_config, which changes a
// setting of the one backend that runs it, where the statement's later
// statements may run on other shards. SELECT set_config('name', 'value',
// is_local) alone, with literals, is a SET the router follows (Setting:
// it sends the session's settings with every batch, and a local one to
// every shard of the transaction, with the row set_config answers from
// the first). Any other call would leave the other shards without the
// setting: it is refused (with one shard in the topology the router
// runs it all the same).
func (c *planCtx) planSetConfig(st *Statement, sel *pg_query.SelectStmt) {
	if s := literalSetConfig(sel); s != nil {
		st.Setting = s
		c.exact = true // the plan holds the literal values
		return
	}
	st.Err = unsupported("set_config other than SELECT set_config('name', 'value', is_local) alone with literal arguments is not supported on more than one shard; use SET or SET LOCAL")
}

// literalSetConfig reads SELECT [pg_catalog.]set_config('name', 'value',
// true|false) with nothing else in the statement as the Setting it makes.
func literalSetConfig(sel *pg_query.SelectStmt) *Setting {
	if sel.Op != pg_query.SetOperation_SETOP_NONE || len(sel.TargetList) != 1 || len(sel.FromClause) > 0 ||
		sel.WhereClause != nil || len(sel.GroupClause) > 0 || sel.HavingClause != nil || len(sel.DistinctClause) > 0 ||
		len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil || sel.WithClause != nil ||
		len(sel.WindowClause) > 0 || len(sel.LockingClause) > 0 || len(sel.ValuesLists) > 0 {
		return nil
	}
	fc := sel.TargetList[0].GetResTarget().GetVal().GetFuncCall()
	if fc == nil || !builtinCall(fc) || funcName(fc) != "set_config" || len(fc.Args) != 3 || fc.Over != nil ||
		fc.AggFilter != nil || len(fc.AggOrder) > 0 || fc.AggStar || fc.AggDistinct || fc.AggWithinGroup || fc.FuncVariadic {
		return nil
	}
	name, ok1 := stringConst(fc.Args[0])
	value, ok2 := stringConst(fc.Args[1])
	local, ok3 := fc.Args[2].GetAConst().GetVal().(*pg_query.A_Const_Boolval)
	if !ok1 || !ok2 || !ok3 || name == "" {
		return nil
	}
	return &Setting{Op: SetValue, Name: strings.ToLower(name), Value: value, Local: local.Boolval.GetBoolval()}
}

// stringConst is the value of a string literal.
func stringConst(n *pg_query.Node) (string, bool) {
	s, ok := n.GetAConst().GetVal().(*pg_query.A_Const_Sval)
	if !ok {
		return "", false
	}
	return s.Sval.GetSval(), true
}
