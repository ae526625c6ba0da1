package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// What a gather would answer otherwise than one Postgres, found in the
// statement's tree: answers that follow the order rows are stored in,
// and values that belong to the transaction or backend that computes.

// orderSensitiveAggregates answer by the order of their input rows.
var orderSensitiveAggregates = map[string]bool{
	"array_agg": true, "string_agg": true, "json_agg": true, "jsonb_agg": true,
	"json_object_agg": true, "jsonb_object_agg": true, "xmlagg": true,
	"json_object_agg_strict": true, "jsonb_object_agg_strict": true,
	"json_object_agg_unique": true, "jsonb_object_agg_unique": true,
	"json_agg_strict": true, "jsonb_agg_strict": true,
}

// orderSensitiveWindows answer by the order of the rows in their
// window, which without an ORDER BY is the order they are stored in.
var orderSensitiveWindows = map[string]bool{
	"row_number": true, "ntile": true, "lag": true, "lead": true,
	"first_value": true, "last_value": true, "nth_value": true,
}

// orderDependent reports a statement whose answer depends on the order
// in which the rows are stored, which gathering does not keep (each
// shard's rows come after the previous shard's): an order-sensitive
// aggregate without its own ORDER BY, a window function that numbers or
// picks rows in a window without ORDER BY (or a named one), DISTINCT ON
// without ORDER BY, or a LIMIT or OFFSET without
// ORDER BY below the top level (at the top level any rows answer it, as
// on Postgres; below, they change what the statement computes).
// Postgres too answers these by an order it does not promise, but one
// Postgres answers them by its heap order, and so they stay refused.
func orderDependent(sel *pg_query.SelectStmt) bool {
	dependent := false
	walk(sel.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.FuncCall:
			if len(x.Funcname) == 0 {
				break
			}
			name := x.Funcname[len(x.Funcname)-1].GetString_().GetSval()
			if len(x.AggOrder) == 0 && orderSensitiveAggregates[name] && (x.Over == nil || len(x.Over.OrderClause) == 0) {
				dependent = true
			}
			if x.Over != nil && orderSensitiveWindows[name] && len(x.Over.OrderClause) == 0 {
				dependent = true
			}
		case *pg_query.SelectStmt:
			if x != sel && (x.LimitCount != nil || x.LimitOffset != nil) && len(x.SortClause) == 0 {
				dependent = true
			}
			if len(x.DistinctClause) > 0 && x.DistinctClause[0].GetNode() != nil && len(x.SortClause) == 0 {
				// DISTINCT ON keeps the first row of each group.
				dependent = true
			}
		}
		return !dependent
	})
	return dependent
}

// txTimeFunctions answer by the transaction or backend they run in.
var txTimeFunctions = map[string]bool{
	"now": true, "current_timestamp": true, "transaction_timestamp": true,
	"statement_timestamp": true, "pg_backend_pid": true,
}

// readsTxTime reports a statement calling txTimeFunctions or reading
// CURRENT_DATE, CURRENT_TIME, CURRENT_TIMESTAMP, LOCALTIME or
// LOCALTIMESTAMP.
func readsTxTime(sel *pg_query.SelectStmt) bool {
	found := false
	walk(sel.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.FuncCall:
			if len(x.Funcname) > 0 && txTimeFunctions[x.Funcname[len(x.Funcname)-1].GetString_().GetSval()] {
				found = true
			}
		case *pg_query.SQLValueFunction:
			switch x.Op {
			case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_USER, pg_query.SQLValueFunctionOp_SVFOP_CURRENT_ROLE,
				pg_query.SQLValueFunctionOp_SVFOP_SESSION_USER, pg_query.SQLValueFunctionOp_SVFOP_USER,
				pg_query.SQLValueFunctionOp_SVFOP_CURRENT_CATALOG, pg_query.SQLValueFunctionOp_SVFOP_CURRENT_SCHEMA:
			default:
				found = true
			}
		}
		return !found
	})
	return found
}
