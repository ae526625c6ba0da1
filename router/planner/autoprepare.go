package planner

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/zeebo/xxh3"
)

// Auto-prepare. A read sent with the simple protocol costs Postgres a
// parse, an analysis and a plan every time; the same read as a prepared
// statement costs a Bind. Many clients (psql, psycopg2, Django, any
// driver that interpolates values) can only send the simple protocol, so
// the router may run such a read as a prepared statement whose parameters
// are the read's literals: `WHERE aid = 42` runs as `WHERE aid = $1` with
// $1 = '42'.
//
// Only literals whose replacement by a parameter cannot change what the
// statement means are replaced, and a statement is auto-prepared only if
// every literal in it is one of those:
//
//   - an operand of `=` whose other operand is a column, or an item of
//     `column IN (...)`;
//   - a LIMIT or OFFSET count.
//
// Each parameter gets the type Postgres gives the literal (int4 or
// numeric for a number; unknown for a string, which Postgres resolves from
// the column exactly as it resolves the literal), so operator resolution
// is the same. A literal anywhere else (a select-list constant, ORDER BY 1,
// a cast, a function argument, a negative number) keeps the statement as
// written. Errors differ in form (a bad value is reported at Bind, without
// the literal's position), so the router runs the statement again as
// written when the prepared form fails before answering anything: the
// error the client sees is Postgres's own.

// maxAutoParams bounds the literals of an auto-prepared statement: long IN
// lists of many lengths would fill every backend with statements used
// once.
const maxAutoParams = 32

// autoFallbackLimit is how many times the prepared form of a statement may
// fail and be run again as written before the router stops preparing it.
const autoFallbackLimit = 16

// AutoPrepared is the prepared form of a simple-protocol read. It is
// shared by every input of the statement's shape.
type AutoPrepared struct {
	// SQL is the statement with each literal replaced by $1, $2, ...
	SQL string
	// ParamOIDs are the parameters' types, as Postgres types the
	// literals: 23 (int4) or 1700 (numeric) for a number, 0 (unknown,
	// resolved by Postgres) for a string.
	ParamOIDs []uint32
	// Name names the statement by its content (SQL and ParamOIDs).
	Name string

	fallbacks atomic.Int32
}

// Failed records that the prepared form failed and the statement ran as
// written; after autoFallbackLimit failures Usable reports false.
func (a *AutoPrepared) Failed() { a.fallbacks.Add(1) }

// Usable reports whether the prepared form is still worth trying.
func (a *AutoPrepared) Usable() bool { return a.fallbacks.Load() < autoFallbackLimit }

// describe is the prepared form's line of EXPLAIN (TESSERA).
func (a *AutoPrepared) describe() string {
	var types []string
	for i, oid := range a.ParamOIDs {
		types = append(types, fmt.Sprintf("$%d %s", i+1, oidNames[oid]))
	}
	if len(types) == 0 {
		return a.SQL
	}
	return a.SQL + " (" + strings.Join(types, ", ") + ")"
}

var oidNames = map[uint32]string{0: "unknown", 23: "integer", 1700: "numeric"}

// StatementName names a prepared statement by its text and parameter
// types, so that every session and router shares one per backend.
func StatementName(sql string, oids []uint32) string {
	return StatementNameAt(sql, oids, 0)
}

// StatementNameAt is StatementName for a statement prepared in schema
// epoch epoch (0 for none): the same text prepared after a schema change
// gets another name, so that it is planned afresh on every backend
// rather than reusing a statement prepared there before the change.
func StatementNameAt(sql string, oids []uint32, epoch int64) string {
	h := xxh3.New()
	h.WriteString(sql)
	var b [8]byte
	for _, o := range oids {
		binary.BigEndian.PutUint32(b[:4], o)
		h.Write(b[:4])
	}
	if epoch != 0 {
		binary.BigEndian.PutUint64(b[:], uint64(epoch))
		h.Write(b[:])
	}
	sum := h.Sum128().Bytes()
	return "tsr_" + hex.EncodeToString(sum[:12])
}

// autoPrepare sets st.Auto and st.lits when st, the only statement of its
// input, can run as a prepared statement; start is the statement's offset
// in the input and f what the walk over it found. The decision and the
// prepared form depend on the statement's shape only, never on a
// literal's value: the plan is shared by every input of that shape.
func (c *planCtx) autoPrepare(st *Statement, f *facts, start int) {
	if st.Err != nil || !st.Pipelinable() || st.Gather != nil {
		return
	}
	params := make(map[int]bool, len(f.params))
	for _, loc := range f.params {
		if r, ok := literalAt(c.sql, c.lits, int(loc)); ok && !r.negated {
			params[r.index] = true
		}
	}
	var lits []span
	for i, sp := range c.lits {
		if sp.start < start || sp.end > start+len(st.SQL) {
			continue
		}
		if !params[i] || len(lits) == maxAutoParams {
			return
		}
		lits = append(lits, span{start: sp.start - start, end: sp.end - start, class: sp.class})
	}
	auto := &AutoPrepared{ParamOIDs: make([]uint32, len(lits))}
	var sql strings.Builder
	prev := 0
	for i, sp := range lits {
		oid, ok := classOID(sp.class)
		if !ok {
			return
		}
		auto.ParamOIDs[i] = oid
		sql.WriteString(st.SQL[prev:sp.start])
		sql.WriteString("$" + strconv.Itoa(i+1))
		prev = sp.end
	}
	sql.WriteString(st.SQL[prev:])
	auto.SQL = sql.String()
	if strings.Count(auto.SQL, "$") != len(lits) {
		// A $ outside the literals: a parameter reference, which the
		// numbering would clash with, or part of a name.
		return
	}
	auto.Name = StatementName(auto.SQL, auto.ParamOIDs)
	st.Auto, st.lits = auto, lits
}

// classOID returns the parameter type that stands for a literal of a
// class: int4 for an integer (one too large for int4 has another type, and
// its statement runs as written), numeric for a number with a point or an
// exponent, unknown (0) for a standard string, which Postgres resolves
// from the context exactly as it resolves the literal. Other literals are
// not replaced.
func classOID(class LiteralClass) (uint32, bool) {
	switch class {
	case IntegerLiteral:
		return 23, true
	case NumericLiteral:
		return 1700, true
	case StringLiteral:
		return 0, true
	}
	return 0, false
}

// fitsParam reports whether a literal token means exactly what a
// parameter of its class's type with the token's value means: an integer
// that fits int4 (Postgres types a larger one int8 or numeric), a string
// without a backslash (whose meaning depends on
// standard_conforming_strings).
func fitsParam(class LiteralClass, lit string) bool {
	switch class {
	case IntegerLiteral:
		n, err := strconv.ParseInt(lit, 10, 64)
		return err == nil && n <= 1<<31-1
	case StringLiteral:
		return strings.IndexByte(lit, '\\') < 0
	}
	return true
}

// AppendAutoParams appends the values of st's literals as a Bind message
// carries text parameters (each an int32 length, then the bytes), and
// reports whether st may run as its prepared form with them; when not
// (an integer too large for int4, a string with a backslash), st runs as
// written.
func (st *Statement) AppendAutoParams(dst []byte) ([]byte, bool) {
	if st.Auto == nil || len(st.lits) != len(st.Auto.ParamOIDs) {
		return dst, false
	}
	for _, sp := range st.lits {
		lit := st.SQL[sp.start:sp.end]
		if !fitsParam(sp.class, lit) {
			return dst, false
		}
		at := len(dst)
		dst = append(dst, 0, 0, 0, 0)
		dst = appendLiteralValue(dst, sp.class, lit, false)
		binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	}
	return dst, true
}

// paramFacts records the A_Consts of e that a parameter may replace
// (autoPrepare): an operand of = beside a column, an item of column IN.
func (f *facts) paramFacts(e *pg_query.A_Expr) {
	if !isEquals(e.Name) {
		return
	}
	switch e.Kind {
	case pg_query.A_Expr_Kind_AEXPR_OP:
		if e.Lexpr.GetColumnRef() != nil {
			f.paramConst(e.Rexpr)
		} else if e.Rexpr.GetColumnRef() != nil {
			f.paramConst(e.Lexpr)
		}
	case pg_query.A_Expr_Kind_AEXPR_IN:
		if e.Lexpr.GetColumnRef() != nil {
			for _, item := range e.Rexpr.GetList().GetItems() {
				f.paramConst(item)
			}
		}
	}
}

// paramConst records n if it is a number or string constant.
func (f *facts) paramConst(n *pg_query.Node) {
	c := n.GetAConst()
	if c == nil {
		return
	}
	switch c.Val.(type) {
	case *pg_query.A_Const_Ival, *pg_query.A_Const_Fval, *pg_query.A_Const_Sval:
		f.params = append(f.params, c.Location)
	}
}
