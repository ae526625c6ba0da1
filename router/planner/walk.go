package planner

import (
	"slices"
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// walk calls visit for every message of the parse tree under m, parents
// first; visit returns false to skip a message's children. It goes through
// protobuf reflection so that no node type (a subquery in a function
// argument, a CTE inside an INSERT) can be forgotten.
func walk(m protoreflect.Message, visit func(proto.Message) bool) {
	if !visit(m.Interface()) {
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind || fd.IsMap() {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walk(l.Get(i).Message(), visit)
			}
			return true
		}
		walk(v.Message(), visit)
		return true
	})
}

// facts is what one walk over a statement's tree finds.
type facts struct {
	ranges []*pg_query.RangeVar // every RangeVar, CTE references included
	ctes   map[string]bool      // names of WITH queries
	consts []int32              // A_Const locations
	params []int32              // locations of A_Consts a parameter may replace (autoprepare.go)
	// crossShard names the first construct that cannot be answered by
	// concatenating the results of several shards ("ORDER BY", ...).
	crossShard string
	// crossOther: something other than aggregate calls needs combining;
	// aggCalls counts the aggregate calls anywhere in the statement.
	crossOther   bool
	aggCalls     int
	limits       int  // SELECTs with a LIMIT (or FETCH FIRST), anywhere
	orders       int  // SELECTs with an ORDER BY, anywhere
	offsets      int  // SELECTs with an OFFSET, anywhere
	groups       int  // SELECTs with a GROUP BY, anywhere
	havings      int  // SELECTs with a HAVING, anywhere
	distincts    int  // SELECTs with DISTINCT (or DISTINCT ON), anywhere
	locking      bool // FOR UPDATE / SHARE
	modifyingCTE bool // WITH x AS (INSERT / UPDATE / DELETE / MERGE ...)
	session      SessionState
	// opaqueCall: a call of a function not known to be free of side
	// effects (sideEffectFree), which may write (nextval, a user's
	// function); the planner cannot tell without the catalog.
	opaqueCall bool
	// calls are the function calls without OVER, which the catalog may
	// show to be aggregates (checkCalls).
	calls []*pg_query.FuncCall
	// setConfig: a call of set_config, which changes a setting of the
	// backend that runs it only (literalSetConfig).
	setConfig bool
	// sequenceCall: nextval, currval, setval or lastval, whose sequences
	// live on the authoritative shard (every shard has a copy that DDL
	// made, which no other shard's values know of).
	sequenceCall bool
}

func collect(n *pg_query.Node) *facts {
	f := &facts{}
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.RangeVar:
			f.ranges = append(f.ranges, x)
			if strings.EqualFold(x.Relname, "pg_prepared_statements") {
				// The session's prepared statements live in one backend:
				// the session keeps it, and sees only its own there.
				f.session |= Prepared | PreparedView
			}
		case *pg_query.A_Const:
			f.consts = append(f.consts, x.Location)
		case *pg_query.A_Expr:
			f.paramFacts(x)
		case *pg_query.CommonTableExpr:
			if f.ctes == nil {
				f.ctes = map[string]bool{}
			}
			f.ctes[x.Ctename] = true
			switch x.Ctequery.GetNode().(type) {
			case *pg_query.Node_InsertStmt, *pg_query.Node_UpdateStmt, *pg_query.Node_DeleteStmt, *pg_query.Node_MergeStmt:
				f.modifyingCTE = true
			}
		case *pg_query.SelectStmt:
			f.selectFacts(x)
		case *pg_query.FuncCall:
			f.funcFacts(x)
		case *pg_query.JsonArrayAgg, *pg_query.JsonObjectAgg:
			f.cross("JSON aggregates")
		case *pg_query.LockingClause:
			// FOR UPDATE OF a names range aliases, not tables.
			f.locking = true
			return false
		case *pg_query.IntoClause:
			// SELECT INTO names a table to create; the planner refuses
			// it before it could be mistaken for a table read.
			return false
		}
		return true
	})
	return f
}

// cross records a construct that concatenating the shards' answers does
// not answer. The first one recorded names the error, unless a construct
// no merge can do comes later: that one is the reason.
func (f *facts) cross(what string) {
	mergeable := what == aggregateFunctions || what == limitClause || what == orderClause || what == groupClause || what == distinctClause || what == offsetClause || what == havingClause
	// GROUP BY and DISTINCT name the refusal over the ORDER BY, LIMIT or
	// aggregates of the same statement, which merges can do alone.
	regroups := (what == groupClause || what == distinctClause) && !f.crossOther && f.crossShard != groupClause && f.crossShard != distinctClause
	if f.crossShard == "" || !mergeable && !f.crossOther || regroups {
		f.crossShard = what
	}
	if !mergeable {
		f.crossOther = true
	}
}

const (
	limitClause    = "LIMIT"
	orderClause    = "ORDER BY"
	groupClause    = "GROUP BY"
	offsetClause   = "OFFSET"
	havingClause   = "HAVING"
	distinctClause = "DISTINCT"
)

const aggregateFunctions = "aggregate functions"

// selectFacts records every clause of a SELECT that combines rows: each
// is checked on its own, since any combination of them must be seen (a
// DISTINCT under a LIMIT is still a DISTINCT).
func (f *facts) selectFacts(s *pg_query.SelectStmt) {
	f.paramConst(s.LimitCount)
	f.paramConst(s.LimitOffset)
	switch s.Op {
	case pg_query.SetOperation_SETOP_UNION:
		f.cross("UNION")
	case pg_query.SetOperation_SETOP_INTERSECT:
		f.cross("INTERSECT")
	case pg_query.SetOperation_SETOP_EXCEPT:
		f.cross("EXCEPT")
	}
	if len(s.SortClause) > 0 {
		f.orders++
		f.cross(orderClause)
	}
	if s.LimitOption == pg_query.LimitOption_LIMIT_OPTION_WITH_TIES {
		f.cross("FETCH ... WITH TIES")
	} else if s.LimitCount != nil {
		f.limits++
		f.cross(limitClause)
	}
	if s.LimitOffset != nil {
		f.offsets++
		f.cross(offsetClause)
	}
	if len(s.GroupClause) > 0 || s.GroupDistinct {
		f.groups++
		f.cross(groupClause)
	}
	if s.HavingClause != nil {
		f.havings++
		f.cross(havingClause)
	}
	if len(s.DistinctClause) > 0 {
		f.distincts++
		f.cross(distinctClause)
	}
	if len(s.WindowClause) > 0 {
		f.cross("window functions")
	}
}

func (f *facts) funcFacts(fc *pg_query.FuncCall) {
	name := funcName(fc)
	if !builtinCall(fc) || !(sideEffectFree[name] || aggregates[name]) {
		f.opaqueCall = true
	}
	if fc.Over == nil {
		f.calls = append(f.calls, fc)
	}
	if sequenceFuncs[name] && builtinCall(fc) {
		f.sequenceCall = true
	}
	switch {
	case fc.Over != nil:
		f.cross("window functions")
	case fc.AggStar || fc.AggDistinct || fc.AggWithinGroup || len(fc.AggOrder) > 0 || fc.AggFilter != nil || aggregates[name]:
		f.aggCalls++
		f.cross(aggregateFunctions)
	}
	switch {
	case sessionLocks[name]:
		f.session |= AdvisoryLock
	case name == "pg_prepared_statement":
		f.session |= Prepared | PreparedView // what pg_prepared_statements shows
	case name == "set_config" && !(len(fc.Args) == 3 && isTrue(fc.Args[2])):
		f.session |= SessionConfig
		f.setConfig = true
	case name == "set_config":
		f.setConfig = true
	}
}

// funcName is a function's name without its schema.
func funcName(fc *pg_query.FuncCall) string {
	if len(fc.Funcname) == 0 {
		return ""
	}
	return strings.ToLower(fc.Funcname[len(fc.Funcname)-1].GetString_().GetSval())
}

// builtinCall reports a call by bare name or in pg_catalog, the schema
// Postgres searches first unless the search path names it later.
func builtinCall(fc *pg_query.FuncCall) bool {
	return len(fc.Funcname) == 1 ||
		len(fc.Funcname) == 2 && strings.EqualFold(fc.Funcname[0].GetString_().GetSval(), "pg_catalog")
}

// isTrue reports the keyword TRUE. A string literal 'true' would make the
// plan depend on a literal's value, which a cached plan must not.
func isTrue(n *pg_query.Node) bool {
	b, ok := n.GetAConst().GetVal().(*pg_query.A_Const_Boolval)
	return ok && b.Boolval.GetBoolval()
}

// aggregates are Postgres's built-in aggregate functions. User-defined
// aggregates called without DISTINCT, ORDER BY, FILTER or * cannot be told
// from plain functions without the catalog (Routines).
var aggregates = setOf(
	"avg", "bit_and", "bit_or", "bit_xor", "bool_and", "bool_or", "count", "every", "max", "min", "sum",
	"any_value", "array_agg", "string_agg", "json_agg", "jsonb_agg", "json_agg_strict", "jsonb_agg_strict",
	"json_object_agg", "jsonb_object_agg", "json_object_agg_strict", "jsonb_object_agg_strict",
	"json_object_agg_unique", "jsonb_object_agg_unique", "json_object_agg_unique_strict",
	"jsonb_object_agg_unique_strict", "range_agg", "range_intersect_agg", "xmlagg",
	"corr", "covar_pop", "covar_samp", "regr_avgx", "regr_avgy", "regr_count", "regr_intercept",
	"regr_r2", "regr_slope", "regr_sxx", "regr_sxy", "regr_syy", "stddev", "stddev_pop",
	"stddev_samp", "variance", "var_pop", "var_samp", "mode", "percentile_cont", "percentile_disc",
)

// sideEffectFree are built-in functions (besides the aggregates) that
// change nothing, so that a statement calling only these may run twice
// with nothing to show for it but its answer. The list is of what
// applications commonly call in reads; a function missing from it only
// costs its statement pipelining (Statement.SideEffects).
var sideEffectFree = setOf(
	// strings
	"lower", "upper", "initcap", "length", "char_length", "character_length", "octet_length", "bit_length",
	"substr", "substring", "left", "right", "lpad", "rpad", "trim", "btrim", "ltrim", "rtrim",
	"replace", "translate", "reverse", "repeat", "concat", "concat_ws", "format", "position", "strpos",
	"split_part", "starts_with", "string_to_array", "array_to_string", "regexp_replace", "regexp_match",
	"regexp_matches", "regexp_split_to_array", "regexp_split_to_table", "md5", "encode", "decode", "quote_ident",
	"quote_literal", "quote_nullable", "ascii", "chr", "to_hex", "normalize", "unaccent",
	// numbers
	"abs", "ceil", "ceiling", "floor", "round", "trunc", "sign", "mod", "power", "sqrt", "cbrt", "exp",
	"ln", "log", "log10", "div", "greatest", "least", "width_bucket", "random", "gen_random_uuid",
	// dates and times
	"now", "current_timestamp", "clock_timestamp", "statement_timestamp", "transaction_timestamp",
	"date_trunc", "date_part", "extract", "age", "make_date", "make_time", "make_timestamp",
	"make_timestamptz", "make_interval", "to_char", "to_date", "to_timestamp", "to_number", "timezone",
	"date_bin", "isfinite", "justify_days", "justify_hours", "justify_interval",
	// arrays, JSON, ranges
	"array_length", "array_position", "array_positions", "array_remove", "array_replace", "array_append",
	"array_prepend", "array_cat", "array_dims", "array_lower", "array_upper", "cardinality", "unnest",
	"generate_series", "generate_subscripts", "to_json", "to_jsonb", "row_to_json", "array_to_json",
	"json_build_object", "jsonb_build_object", "json_build_array", "jsonb_build_array", "json_object",
	"jsonb_object", "json_extract_path", "jsonb_extract_path", "json_extract_path_text",
	"jsonb_extract_path_text", "json_array_length", "jsonb_array_length", "json_typeof", "jsonb_typeof",
	"json_array_elements", "jsonb_array_elements", "json_array_elements_text", "jsonb_array_elements_text",
	"json_each", "jsonb_each", "json_each_text", "jsonb_each_text", "json_object_keys", "jsonb_object_keys",
	"jsonb_set", "jsonb_insert", "jsonb_strip_nulls", "jsonb_pretty", "jsonb_path_query",
	"jsonb_path_query_array", "jsonb_path_query_first", "jsonb_path_exists", "jsonb_path_match",
	"lower_inc", "upper_inc", "isempty", "range_merge",
	// other
	"coalesce", "nullif", "pg_typeof", "version", "current_setting", "current_database", "current_schema",
	"current_schemas", "current_user", "session_user", "pg_backend_pid", "inet_client_addr", "host",
	"num_nulls", "num_nonnulls", "pg_column_size", "row_number", "rank", "dense_rank", "percent_rank",
	"cume_dist", "ntile", "lag", "lead", "first_value", "last_value", "nth_value",
)

// sequenceFuncs read or advance a sequence.
var sequenceFuncs = setOf("nextval", "currval", "setval", "lastval")

// sessionLocks take or release session-level advisory locks, which outlive
// the transaction (the _xact_ variants do not).
var sessionLocks = setOf(
	"pg_advisory_lock", "pg_advisory_lock_shared", "pg_try_advisory_lock", "pg_try_advisory_lock_shared",
	"pg_advisory_unlock", "pg_advisory_unlock_shared", "pg_advisory_unlock_all",
)

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// HighestParam is the highest parameter number ($n) sql uses, 0 for none
// or when it does not parse.
func HighestParam(sql string) int {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return 0
	}
	n := 0
	for _, raw := range tree.Stmts {
		walk(raw.Stmt.ProtoReflect(), func(m proto.Message) bool {
			if p, ok := m.(*pg_query.ParamRef); ok && int(p.Number) > n {
				n = int(p.Number)
			}
			return true
		})
	}
	return n
}

// ParamRef is where a parameter ($n) is written in a statement's text:
// bytes [Start, End), parameter Number.
type ParamRef struct {
	Start, End, Number int
}

// ParamRefs returns the parameters sql (one statement) uses, in the
// order they are written; false when it does not parse or a location the
// parser gave is not the $n it names (the text could not be rewritten
// in place).
func ParamRefs(sql string) ([]ParamRef, bool) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return nil, false
	}
	var refs []ParamRef
	ok := true
	walk(tree.Stmts[0].Stmt.ProtoReflect(), func(m proto.Message) bool {
		p, is := m.(*pg_query.ParamRef)
		if !is {
			return true
		}
		start := int(p.Location)
		if start < 0 || start >= len(sql) || sql[start] != '$' {
			ok = false
			return true
		}
		end := start + 1
		for end < len(sql) && sql[end] >= '0' && sql[end] <= '9' {
			end++
		}
		if p.Number < 1 || sql[start+1:end] != strconv.Itoa(int(p.Number)) {
			ok = false
		}
		refs = append(refs, ParamRef{Start: start, End: end, Number: int(p.Number)})
		return true
	})
	slices.SortFunc(refs, func(a, b ParamRef) int { return a.Start - b.Start })
	return refs, ok
}
