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
