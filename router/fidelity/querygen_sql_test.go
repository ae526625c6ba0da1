package fidelity_test

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
)

// The random query generator of TestQueryGen: SELECTs over the
// differential schema (items sharded by k, events colocated on k, kinds a
// reference table, notes unsharded) built as clauses that the shrinker can
// drop or simplify one at a time. It writes only statements whose answer
// one Postgres fixes up to what the harness's comparator allows (row order
// without ORDER BY, ties, rows a LIMIT cuts): no LIMIT in subqueries, no
// row_number over a partial order, no order-dependent aggregates, no
// division or casts that fail on some rows only.

// genColumn is a column a generated expression may read.
type genColumn struct {
	name, typ string // typ: int, num, float, text, bool, date, ts, uuid
}

type genTable struct {
	name   string
	cols   []genColumn
	unique []string // columns that identify a row
}

var genTables = map[string]genTable{
	"items": {"items", []genColumn{{"k", "int"}, {"small", "int"}, {"qty", "int"}, {"big", "int8"},
		{"price", "num"}, {"ratio", "float"}, {"name", "text"}, {"flag", "bool"}, {"day", "date"},
		{"at", "ts"}, {"uid", "uuid"}, {"kind", "int"}}, []string{"k"}},
	"events": {"events", []genColumn{{"k", "int"}, {"seq", "int"}, {"amount", "num"}, {"note", "text"}, {"kind", "int"}},
		[]string{"k", "seq"}},
	"kinds": {"kinds", []genColumn{{"code", "int"}, {"label", "text"}}, []string{"code"}},
	"notes": {"notes", []genColumn{{"id", "int"}, {"k", "int"}, {"body", "text"}}, []string{"id"}},
	// Text under C, en-x-icu and sv-x-icu, char(4), citext and an enum.
	// citext is never generated: its equality and order ignore case, so
	// Postgres's answers to GROUP BY, DISTINCT and ORDER BY on it depend on
	// the order rows are read (which of "Hello" and "hello" stands for the
	// group; ties the comparator cannot see), and no two plans need agree;
	// the corpus covers it by hand.
	"labels": {"labels", []genColumn{{"k", "int"}, {"c", "text"}, {"icu", "text"}, {"sv", "text"}, {"pad", "text"},
		{"ci", "citext"}, {"mood", "mood"}}, []string{"k"}},
}

// genExpr is an expression with the simpler ones the shrinker may put in
// its place. Parameters are written as "\x00N\x00", N indexing the
// query's argument list, and numbered $1 … when rendered.
type genExpr struct {
	sql     string
	simpler []genExpr
}

func lit(s string) genExpr { return genExpr{sql: s} }

type genJoin struct {
	kind, table, alias string
	on                 genExpr
}

type genOrder struct {
	key  genExpr
	dir  string
	null string
}

// genQuery is one SELECT, or a set operation of two.
type genQuery struct {
	distinct      bool
	sel           []genExpr // each rendered with an alias c1, c2, …
	from, alias   string    // the first FROM item
	joins         []genJoin
	where         []genExpr
	group         []genExpr
	having        []genExpr
	order         []genOrder
	limit, offset string
	setop         string // UNION, UNION ALL, INTERSECT, EXCEPT, with other
	other         *genQuery
	args          []any // parameters' values, by index
}

var param = regexp.MustCompile("\x00([0-9]+)\x00")

// render writes q as SQL with its parameters numbered in order of use.
func (q *genQuery) render() (string, []any) {
	raw := q.raw()
	var args []any
	num := map[string]int{}
	sql := param.ReplaceAllStringFunc(raw, func(m string) string {
		if n, ok := num[m]; ok {
			return fmt.Sprintf("$%d", n)
		}
		i, _ := strconv.Atoi(strings.Trim(m, "\x00"))
		args = append(args, q.args[i])
		num[m] = len(args)
		return fmt.Sprintf("$%d", len(args))
	})
	return sql, args
}

func (q *genQuery) raw() string {
	var b strings.Builder
	if q.other != nil {
		b.WriteString("(" + q.block() + ") " + q.setop + " (" + q.other.block() + ")")
	} else {
		b.WriteString(q.block())
	}
	if len(q.order) > 0 {
		b.WriteString(" ORDER BY ")
		for i, o := range q.order {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(o.key.sql + o.dir + o.null)
		}
	}
	if q.limit != "" {
		b.WriteString(" LIMIT " + q.limit)
	}
	if q.offset != "" {
		b.WriteString(" OFFSET " + q.offset)
	}
	return b.String()
}

// block is the SELECT without ORDER BY, LIMIT and OFFSET.
func (q *genQuery) block() string {
	var b strings.Builder
	b.WriteString("SELECT ")
	if q.distinct {
		b.WriteString("DISTINCT ")
	}
	for i, e := range q.sel {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s AS c%d", e.sql, i+1)
	}
	b.WriteString(" FROM " + q.from + " " + q.alias)
	for _, j := range q.joins {
		fmt.Fprintf(&b, " %s %s %s ON %s", j.kind, j.table, j.alias, j.on.sql)
	}
	writeList(&b, " WHERE ", " AND ", q.where)
	writeList(&b, " GROUP BY ", ", ", q.group)
	writeList(&b, " HAVING ", " AND ", q.having)
	return b.String()
}

func writeList(b *strings.Builder, head, sep string, es []genExpr) {
	for i, e := range es {
		if i == 0 {
			b.WriteString(head)
		} else {
			b.WriteString(sep)
		}
		b.WriteString(e.sql)
	}
}

// generator writes one query from its own random source.
type generator struct {
	r    *rand.Rand
	args *[]any
}

func (g *generator) chance(p float64) bool { return g.r.Float64() < p }

func (g *generator) pick(list ...string) string { return list[g.r.IntN(len(list))] }

// scopeCol is a column of a FROM item, qualified.
type scopeCol struct {
	ref, typ string
}

type genScope struct {
	cols   []scopeCol
	single bool     // one table: its unique columns order rows totally
	unique []string // qualified
	keys   []string // qualified shard keys of items and events
}

func (s *genScope) add(alias string, t genTable) {
	for _, c := range t.cols {
		s.cols = append(s.cols, scopeCol{alias + "." + c.name, c.typ})
	}
	for _, u := range t.unique {
		s.unique = append(s.unique, alias+"."+u)
	}
	if t.name == "items" || t.name == "events" || t.name == "labels" {
		s.keys = append(s.keys, alias+".k")
	}
}

func (s *genScope) ofType(typ string) []string {
	var out []string
	for _, c := range s.cols {
		if c.typ == typ {
			out = append(out, c.ref)
		}
	}
	return out
}

// query writes a random statement.
func (g *generator) query() *genQuery {
	if g.chance(0.1) {
		return g.setOperation()
	}
	q, sc := g.selectBlock()
	mode := g.r.IntN(10)
	switch {
	case mode < 4: // projection
		n := 1 + g.r.IntN(4)
		for range n {
			q.sel = append(q.sel, g.expr(sc, g.anyType(sc)))
		}
		q.distinct = g.chance(0.2)
	case mode < 6: // scalar aggregates
		n := 1 + g.r.IntN(3)
		for range n {
			q.sel = append(q.sel, g.aggregate(sc))
		}
		if g.chance(0.1) {
			q.having = append(q.having, g.havingPred(sc))
		}
	case mode < 9: // GROUP BY
		n := 1 + g.r.IntN(2)
		for range n {
			e := g.groupKey(sc)
			q.group = append(q.group, e)
			q.sel = append(q.sel, e)
		}
		for range 1 + g.r.IntN(3) {
			q.sel = append(q.sel, g.aggregate(sc))
		}
		if g.chance(0.3) {
			q.having = append(q.having, g.havingPred(sc))
		}
		q.distinct = g.chance(0.05)
	default: // window functions
		for range 1 + g.r.IntN(2) {
			q.sel = append(q.sel, g.column(sc, g.anyType(sc)))
		}
		q.sel = append(q.sel, g.window(sc))
	}
	g.orderLimit(q, sc)
	return q
}

// selectBlock chooses the FROM items and the WHERE clause.
func (g *generator) selectBlock() (*genQuery, *genScope) {
	q := &genQuery{}
	sc := &genScope{}
	base := "items"
	if g.chance(0.25) {
		base = g.pick("events", "events", "kinds", "notes", "labels", "labels")
	}
	q.from, q.alias = base, base[:1]
	sc.add(q.alias, genTables[base])
	if base == "items" || base == "events" || base == "labels" {
		for i := range g.r.IntN(3) {
			if g.chance(0.5) && i == 0 {
				continue
			}
			q.joins = append(q.joins, g.join(q, sc, i))
		}
	}
	sc.single = len(q.joins) == 0
	for range g.r.IntN(4) {
		q.where = append(q.where, g.predicate(sc, 2))
	}
	return q, sc
}

// join adds a join to items or events: colocated on k, off the key, with
// the reference table or the unsharded one.
func (g *generator) join(q *genQuery, sc *genScope, i int) genJoin {
	kind := g.pick("JOIN", "JOIN", "LEFT JOIN")
	left := q.alias
	// labels has no kind: its joins off the key use k.
	kindCol := left + ".kind"
	if q.from == "labels" {
		kindCol = left + ".k"
	}
	var j genJoin
	switch g.r.IntN(7) {
	case 6:
		j = genJoin{kind, "labels", fmt.Sprintf("l%d", i), lit(fmt.Sprintf("l%d.k = %s.k", i, left))}
	case 0, 1:
		j = genJoin{kind, "events", fmt.Sprintf("e%d", i), lit(fmt.Sprintf("e%d.k = %s.k", i, left))}
		if g.chance(0.3) {
			j.on = lit(fmt.Sprintf("e%d.kind = %s", i, kindCol))
		}
	case 2, 3:
		j = genJoin{kind, "kinds", fmt.Sprintf("kd%d", i), lit(fmt.Sprintf("kd%d.code = %s", i, kindCol))}
	case 4:
		j = genJoin{kind, "notes", fmt.Sprintf("n%d", i), lit(fmt.Sprintf("n%d.k = %s.k", i, left))}
	default:
		j = genJoin{kind, "items", fmt.Sprintf("i%d", i), lit(fmt.Sprintf("i%d.k = %s.k", i, left))}
		if g.chance(0.4) {
			j.on = lit(fmt.Sprintf("i%d.qty = %s", i, kindCol))
		}
	}
	if g.chance(0.2) {
		sub := &genScope{}
		sub.add(j.alias, genTables[j.table])
		j.on = genExpr{sql: j.on.sql + " AND " + g.predicate(sub, 0).sql, simpler: []genExpr{j.on}}
	}
	sc.add(j.alias, genTables[j.table])
	return j
}

var genTypes = []string{"int", "int", "int", "int8", "num", "text", "text", "bool", "date", "float", "ts", "uuid", "mood"}

func (g *generator) anyType(sc *genScope) string {
	for {
		t := genTypes[g.r.IntN(len(genTypes))]
		if len(sc.ofType(t)) > 0 {
			return t
		}
	}
}

// column is a column of typ, or, when the FROM items have none, a
// condition on an integer column for bool and an integer column for
// others (every table has one).
func (g *generator) column(sc *genScope, typ string) genExpr {
	cols := sc.ofType(typ)
	if len(cols) == 0 {
		ints := sc.ofType("int")
		c := ints[g.r.IntN(len(ints))]
		if typ == "bool" {
			return lit("(" + c + " > 2)")
		}
		return lit(c)
	}
	return lit(cols[g.r.IntN(len(cols))])
}

// param makes v a parameter, or writes it as the literal s.
func (g *generator) param(s string, v any) string {
	if g.args == nil || !g.chance(0.25) {
		return s
	}
	*g.args = append(*g.args, v)
	return fmt.Sprintf("\x00%d\x00", len(*g.args)-1)
}

func (g *generator) literal(typ string) string {
	switch typ {
	case "int":
		v := int64(g.r.IntN(50) - 3)
		return g.param(fmt.Sprint(v), v)
	case "int8":
		return fmt.Sprint(int64(g.r.IntN(97)-48) * 1_000_000_000_007)
	case "num":
		return fmt.Sprintf("%d.%d", g.r.IntN(16), g.r.IntN(100))
	case "float":
		return fmt.Sprint(float64(g.r.IntN(6)) / 4)
	case "text":
		s := g.pick("alpha", "beta", "Gamma", "delta", "", "b", "zeta")
		return g.param("'"+s+"'", s)
	case "bool":
		return g.pick("true", "false")
	case "mood":
		return g.pick("'sad'", "'ok'", "'happy'")
	case "date":
		return fmt.Sprintf("DATE '2024-01-%02d'", 1+g.r.IntN(8))
	case "ts":
		return fmt.Sprintf("TIMESTAMPTZ '2024-03-0%d %02d:00:00+00'", 1+g.r.IntN(9), g.r.IntN(24))
	case "uuid":
		return fmt.Sprintf("'%08x-0000-4000-8000-%012x'", (g.r.IntN(48)*2654435761)%(1<<32), g.r.IntN(48))
	}
	return "NULL"
}

// expr is an expression of typ.
func (g *generator) expr(sc *genScope, typ string) genExpr {
	if len(sc.ofType(typ)) == 0 && typ != "bool" {
		typ = "int"
	}
	c := g.column(sc, typ)
	if g.chance(0.5) {
		return c
	}
	var s string
	switch typ {
	case "int":
		s = g.pick("%s + 1", "%s * 2", "abs(%s)", "coalesce(%s, 0)", "-%s", "%s %% 3", "greatest(%s, 2)")
	case "num":
		s = g.pick("%s * 2", "round(%s, 1)", "coalesce(%s, 0)", "%s + 0.5", "abs(%s)")
	case "float":
		s = g.pick("%s * 2", "%s + 0.5", "coalesce(%s, -1)")
	case "text":
		s = g.pick("upper(%s)", "%s || 'x'", "coalesce(%s, '~')", "substr(%s, 2)", "length(%s)::text", "lower(%s)")
	case "bool":
		s = g.pick("NOT %s", "coalesce(%s, false)", "%s IS TRUE")
	case "date":
		s = g.pick("%s + 1", "%s - 2")
	case "ts":
		s = g.pick("%s + interval '1 hour'", "date_trunc('day', %s)")
	default:
		return c
	}
	e := genExpr{sql: strings.Replace(s, "%s", c.sql, 1), simpler: []genExpr{c}}
	if strings.Contains(e.sql, "%%") {
		e.sql = strings.Replace(e.sql, "%%", "%", 1)
	}
	if g.chance(0.1) {
		// No parameter in a CASE branch: its type would be the other
		// branch's, a question of its own.
		p, args := g.predicate(sc, 0), g.args
		g.args = nil
		e = genExpr{sql: fmt.Sprintf("CASE WHEN %s THEN %s ELSE %s END", p.sql, e.sql, g.literal(typ)), simpler: []genExpr{e}}
		g.args = args
	}
	return e
}

// predicate is a boolean condition; depth bounds its nesting.
func (g *generator) predicate(sc *genScope, depth int) genExpr {
	if len(sc.keys) > 0 && g.chance(0.3) {
		return g.keyPredicate(sc)
	}
	if depth > 0 {
		switch g.r.IntN(12) {
		case 0:
			a, b := g.predicate(sc, depth-1), g.predicate(sc, depth-1)
			return genExpr{sql: "(" + a.sql + " OR " + b.sql + ")", simpler: []genExpr{a, b}}
		case 1:
			a := g.predicate(sc, depth-1)
			return genExpr{sql: "NOT (" + a.sql + ")", simpler: []genExpr{a}}
		case 2:
			return g.subqueryPredicate(sc)
		}
	}
	typ := g.anyType(sc)
	c := g.expr(sc, typ)
	var s string
	switch g.r.IntN(8) {
	case 0:
		s = c.sql + g.pick(" IS NULL", " IS NOT NULL")
	case 1:
		if typ == "bool" {
			s = c.sql
		} else {
			s = fmt.Sprintf("%s IN (%s, %s)", c.sql, g.literal(typ), g.literal(typ))
		}
	case 2:
		if typ == "text" {
			s = fmt.Sprintf("%s %s '%s'", c.sql, g.pick("LIKE", "ILIKE", "NOT LIKE"), g.pick("%a%", "b%", "%", "_"))
		} else {
			s = fmt.Sprintf("%s BETWEEN %s AND %s", c.sql, g.literal(typ), g.literal(typ))
		}
	case 3:
		s = fmt.Sprintf("%s IS DISTINCT FROM %s", c.sql, g.literal(typ))
	default:
		s = fmt.Sprintf("%s %s %s", c.sql, g.pick("=", "<>", "<", "<=", ">", ">="), g.literal(typ))
	}
	return genExpr{sql: s, simpler: []genExpr{lit("true")}}
}

// keyPredicate restricts a shard key, in one of the forms Postgres
// accepts.
func (g *generator) keyPredicate(sc *genScope) genExpr {
	k := sc.keys[g.r.IntN(len(sc.keys))]
	v := func() int64 { return int64(g.r.IntN(52)) }
	var s string
	switch g.r.IntN(10) {
	case 0:
		s = fmt.Sprintf("%d = %s", v(), k)
	case 1:
		s = fmt.Sprintf("%s IN (%d, %d, %d)", k, v(), v(), v())
	case 2:
		s = fmt.Sprintf("%s = ANY ('{%d,%d}'::bigint[])", k, v(), v())
	case 3:
		s = fmt.Sprintf("%s = '%d'", k, v())
	case 4:
		s = fmt.Sprintf("%s = %d::int2", k, v())
	case 5:
		s = fmt.Sprintf("%s BETWEEN %d AND %d", k, v(), v()+5)
	case 6:
		s = fmt.Sprintf("(%s = %d OR %s = %d)", k, v(), k, v())
	case 7:
		s = fmt.Sprintf("%s = %s", k, g.param(fmt.Sprint(v()), v()))
	default:
		s = fmt.Sprintf("%s = %d", k, v())
	}
	return genExpr{sql: s, simpler: []genExpr{lit("true")}}
}

// subqueryPredicate is IN, EXISTS (correlated on the key or not) or a
// comparison with a scalar subquery.
func (g *generator) subqueryPredicate(sc *genScope) genExpr {
	var s string
	ints := sc.ofType("int")
	c := ints[g.r.IntN(len(ints))]
	switch g.r.IntN(4) {
	case 0:
		s = fmt.Sprintf("%s IN (SELECT %s FROM events WHERE amount > %d)", c, g.pick("k", "kind", "seq"), g.r.IntN(10))
	case 1:
		if len(sc.keys) > 0 {
			s = fmt.Sprintf("%sEXISTS (SELECT 1 FROM events es WHERE es.k = %s AND es.seq > %d)", g.pick("", "NOT "), sc.keys[0], g.r.IntN(3))
		} else {
			s = fmt.Sprintf("EXISTS (SELECT 1 FROM events es WHERE es.kind = %s)", c)
		}
	case 2:
		s = fmt.Sprintf("%s > (SELECT %s FROM items)", c, g.pick("avg(qty)", "min(kind)", "count(*) / 10"))
	default:
		s = fmt.Sprintf("%s IN (SELECT code FROM kinds WHERE label IS NOT NULL)", c)
	}
	return genExpr{sql: s, simpler: []genExpr{lit("true")}}
}

// aggregate is an aggregate call, sometimes with FILTER.
func (g *generator) aggregate(sc *genScope) genExpr {
	var s string
	switch g.r.IntN(10) {
	case 0:
		s = "count(*)"
	case 1:
		s = "count(" + g.column(sc, g.anyType(sc)).sql + ")"
	case 2:
		s = "sum(" + g.expr(sc, g.pick("int", "int", "int8", "num", "float")).sql + ")"
	case 3:
		s = g.pick("min", "max") + "(" + g.expr(sc, g.pick("int", "int8", "num", "text", "date", "ts", "mood")).sql + ")"
	case 4:
		s = "avg(" + g.column(sc, g.pick("int", "num")).sql + ")"
	case 5:
		s = g.pick("bool_and", "bool_or", "every") + "(" + g.expr(sc, "bool").sql + ")"
	case 6:
		s = "count(DISTINCT " + g.column(sc, g.anyType(sc)).sql + ")"
	case 7:
		s = "sum(DISTINCT " + g.column(sc, "int").sql + ")"
	default:
		s = g.pick("count(*)", "sum(", "max(", "min(") + ""
		if s != "count(*)" {
			s += g.column(sc, "int").sql + ")"
		}
	}
	e := genExpr{sql: s, simpler: []genExpr{lit("count(*)")}}
	if g.chance(0.2) {
		e = genExpr{sql: s + " FILTER (WHERE " + g.predicate(sc, 0).sql + ")", simpler: []genExpr{e}}
	}
	return e
}

func (g *generator) groupKey(sc *genScope) genExpr {
	return g.expr(sc, g.pick("int", "int", "text", "text", "bool", "date", "num", "mood"))
}

// havingPred compares an aggregate with a literal.
func (g *generator) havingPred(sc *genScope) genExpr {
	a := g.pick("count(*)", "sum("+g.column(sc, "int").sql+")", "max("+g.column(sc, "int").sql+")", "count(DISTINCT "+g.column(sc, "int").sql+")")
	return genExpr{sql: fmt.Sprintf("%s %s %d", a, g.pick(">", ">=", "<", "=", "<>"), g.r.IntN(6)), simpler: []genExpr{lit("true")}}
}

// window is a window function whose value one Postgres fixes whatever
// the order of the rows it reads: row_number only over a total order.
func (g *generator) window(sc *genScope) genExpr {
	part := ""
	if g.chance(0.6) {
		part = "PARTITION BY " + g.column(sc, g.pick("int", "text", "bool")).sql + " "
	}
	order := g.column(sc, g.pick("int", "text", "date", "num")).sql
	var s string
	switch g.r.IntN(6) {
	case 0:
		s = fmt.Sprintf("rank() OVER (%sORDER BY %s)", part, order)
	case 1:
		s = fmt.Sprintf("dense_rank() OVER (%sORDER BY %s%s)", part, order, g.pick("", " DESC", " NULLS FIRST"))
	case 2:
		s = fmt.Sprintf("count(*) OVER (%s)", strings.TrimSpace(part))
	case 3:
		s = fmt.Sprintf("sum(%s) OVER (%sORDER BY %s)", g.column(sc, "int").sql, part, order)
	case 4:
		if sc.single {
			s = fmt.Sprintf("row_number() OVER (%sORDER BY %s)", part, strings.Join(sc.unique, ", "))
		} else {
			s = fmt.Sprintf("max(%s) OVER (%s)", g.column(sc, "int").sql, strings.TrimSpace(part))
		}
	default:
		s = fmt.Sprintf("avg(%s) OVER (%s)", g.column(sc, "int").sql, strings.TrimSpace(part))
	}
	return genExpr{sql: s, simpler: []genExpr{lit("1")}}
}

// orderLimit adds ORDER BY (by output name, position or, in a plain
// projection, an expression), LIMIT and OFFSET.
func (g *generator) orderLimit(q *genQuery, sc *genScope) {
	if g.chance(0.6) {
		for range 1 + g.r.IntN(2) {
			var key genExpr
			switch {
			case g.chance(0.3):
				key = lit(fmt.Sprint(1 + g.r.IntN(len(q.sel))))
			case len(q.group) == 0 && !q.distinct && !isAggregate(q) && g.chance(0.3):
				key = g.expr(sc, g.anyType(sc))
			default:
				key = lit(fmt.Sprintf("c%d", 1+g.r.IntN(len(q.sel))))
			}
			q.order = append(q.order, genOrder{key, g.pick("", " DESC", " ASC"), g.pick("", "", " NULLS FIRST", " NULLS LAST")})
		}
	}
	if g.chance(0.45) {
		q.limit = g.param(fmt.Sprint(g.r.IntN(20)), int64(g.r.IntN(20)))
	}
	if g.chance(0.2) {
		q.offset = fmt.Sprint(g.r.IntN(10))
	}
}

func isAggregate(q *genQuery) bool {
	for _, e := range q.sel {
		if strings.Contains(e.sql, "(") && (strings.HasPrefix(e.sql, "count") || strings.HasPrefix(e.sql, "sum") ||
			strings.HasPrefix(e.sql, "min") || strings.HasPrefix(e.sql, "max") || strings.HasPrefix(e.sql, "avg") ||
			strings.HasPrefix(e.sql, "bool_") || strings.HasPrefix(e.sql, "every")) {
			return true
		}
	}
	return false
}

// setOperation combines two one-column SELECTs of one type.
func (g *generator) setOperation() *genQuery {
	typ := g.pick("int", "int", "text", "bool", "date")
	side := func() *genQuery {
		for {
			q, sc := g.selectBlock()
			if len(sc.ofType(typ)) > 0 {
				q.sel = []genExpr{g.expr(sc, typ)}
				return q
			}
		}
	}
	q := side()
	q.other = side()
	q.setop = g.pick("UNION", "UNION ALL", "INTERSECT", "EXCEPT", "INTERSECT ALL", "EXCEPT ALL")
	if g.chance(0.5) {
		q.order = []genOrder{{lit("1"), g.pick("", " DESC"), ""}}
		if g.chance(0.5) {
			q.limit = fmt.Sprint(g.r.IntN(10))
		}
	}
	return q
}
