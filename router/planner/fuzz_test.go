package planner

import (
	"bytes"
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/tesseradb/tessera/topo"
)

var fuzzSeeds = []string{
	"SELECT * FROM customers WHERE customer_id = 42",
	"SELECT * FROM customers WHERE customer_id IN (1, -2, '3', $1) AND name = E'x\\'y' ORDER BY 1 LIMIT 10",
	"INSERT INTO customers (customer_id, name) VALUES (42, 'a'), (1, $$b$$) RETURNING *",
	"UPDATE customers SET name = 'x' || 'y' WHERE customer_id = - - 5",
	"select 'a'\n'b', U&'d\\0061t' UESCAPE '\\', B'101', X'1f', 1.5e3, .5, 5., $q$;$q$; select 1",
	"WITH c AS (SELECT * FROM orders WHERE customer_id = 1) SELECT count(*) FROM c JOIN customers USING (customer_id)",
	"EXPLAIN (TESSERA) SELECT * FROM customers WHERE customer_id = 1",
	"SET search_path = 'a', b; SHOW search_path; BEGIN; COMMIT",
	"CREATE TABLE t (a varchar(20) DEFAULT 'x', b numeric(10, 2) CHECK (b > -1)); COMMENT ON TABLE t IS 'c'",
	"SELECT /* a /* nested */ */ 1 -- trailing",
	"SELECT 1 + 2 -3 * - 4, 'it''s', \"quoted \"\" ident\", $1::int8, CAST('7' AS bigint), INTERVAL '1' DAY",
	"SELECT 1_000, 0x1f, 1..2, 'unterminated",
	"COPY (SELECT 1) TO STDOUT; PREPARE TRANSACTION 'x'; FETCH 5 FROM c",
	"SELECT pg_advisory_lock(1), set_config('a', 'b', false) FROM customers WHERE customer_id = 1",
	"SELECT * FROM customers WHERE customer_id IN ($0, $2, $3::int8)",
}

// FuzzScan checks the scanner's invariants on any input.
func FuzzScan(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		var sc scan
		sc.run(sql)
		end := 0
		for _, l := range sc.lits {
			if l.start < end || l.end <= l.start || l.end > len(sql) {
				t.Fatalf("literal %+v after offset %d in %d bytes", l, end, len(sql))
			}
			end = l.end
		}
		for _, s := range sc.semis {
			if sql[s] != ';' {
				t.Fatalf("semicolon at %d is %q", s, sql[s])
			}
		}
		if !strings.Contains(sql, "\x00") && bytes.Count(sc.shape, []byte{placeholder}) != len(sc.lits) {
			t.Fatalf("%d placeholders for %d literals", bytes.Count(sc.shape, []byte{placeholder}), len(sc.lits))
		}
		for _, l := range sc.lits {
			if l.start < len(sql) && isSpace(sql[l.start]) {
				t.Fatalf("literal starts with whitespace: %+v", l)
			}
		}
	})
}

// FuzzPlan plans any input without panicking and checks the cache's
// safety: for an input the planner would share by shape, replacing its
// literals by others of the same class must keep the shape, keep
// pg_query's fingerprint (which ignores constants), and give from the
// cache the plan a fresh planner makes.
func FuzzPlan(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	for _, c := range routeCases {
		f.Add(c.sql)
	}
	for _, c := range colocationCases {
		f.Add(c.sql)
	}
	top := loadTopology(f, "store_xxhash.json")
	f.Fuzz(func(t *testing.T, sql string) { checkCacheSafety(t, top, sql) })
}

func checkCacheSafety(t *testing.T, top *topo.Topology, sql string) {
	p := New(64)
	in := store(sql)
	in.ParamOIDs = []uint32{0, 23, 25}
	stmts, err := p.Plan(top, 1, testSchema, in)
	if err != nil {
		return
	}
	for _, st := range stmts {
		st.Describe(nil)
	}
	var sc scan
	sc.run(sql)
	if _, shape, cacheable, _ := parse(top, testSchema, &in, &sc); sc.odd || !shape || !cacheable {
		return
	}
	variant := substitute(sql, sc.lits)
	var vs scan
	vs.run(variant)
	if vs.odd || !bytes.Equal(vs.shape, sc.shape) {
		t.Fatalf("substitution changed the shape:\n%q\n%q", sql, variant)
	}
	fa, errA := pg_query.Fingerprint(sql)
	fb, errB := pg_query.Fingerprint(variant)
	if errA != nil || errB != nil {
		return // e.g. the variant's date literal is not a date
	}
	if fa != fb {
		t.Fatalf("same shape, different fingerprints:\n%q\n%q", sql, variant)
	}
	vin := in
	vin.SQL = variant
	cached, err := p.Plan(top, 1, testSchema, vin)
	if err != nil {
		t.Fatalf("cached plan of %q: %v", variant, err)
	}
	fresh, err := New(0).Plan(top, 1, testSchema, vin)
	if err != nil {
		t.Fatalf("fresh plan of %q: %v", variant, err)
	}
	if describeAll(cached) != describeAll(fresh) {
		t.Fatalf("%q then %q:\ncached:\n%s\nfresh:\n%s", sql, variant, describeAll(cached), describeAll(fresh))
	}
	for i := range cached {
		// An auto-prepared statement's parameters are the variant's own
		// literals, whether its plan came from the cache or not.
		a, okA := cached[i].AppendAutoParams(nil)
		b, okB := fresh[i].AppendAutoParams(nil)
		if okA != okB || !bytes.Equal(a, b) {
			t.Fatalf("%q then %q: parameters from the cache %q (%v), fresh %q (%v)", sql, variant, a, okA, b, okB)
		}
	}
}

// FuzzShapeFingerprint checks that two inputs the planner would share a
// plan between have the same pg_query fingerprint.
func FuzzShapeFingerprint(f *testing.F) {
	f.Add("SELECT * FROM t WHERE a = 1", "SELECT  *  FROM t WHERE a = 22")
	f.Add("SELECT 'a', -1 FROM t -- x", "SELECT 'b''c', -2 /* y */ FROM t")
	f.Add("SELECT 'a'\n'b'", "SELECT 'a' 'b'")
	f.Add("SELECT $$a$$", "SELECT $b$x$b$")
	top := loadTopology(f, "store_xxhash.json")
	f.Fuzz(func(t *testing.T, a, b string) {
		var sa, sb scan
		sa.run(a)
		sb.run(b)
		if sa.odd || sb.odd || !bytes.Equal(sa.shape, sb.shape) {
			return
		}
		in := store(a)
		if _, shape, _, err := parse(top, testSchema, &in, &sa); err != nil || !shape {
			return
		}
		fa, errA := pg_query.Fingerprint(a)
		fb, errB := pg_query.Fingerprint(b)
		if errA == nil && errB == nil && fa != fb {
			t.Fatalf("same shape, different fingerprints:\n%q\n%q", a, b)
		}
	})
}

// substitute replaces each literal of sql by another of its class.
func substitute(sql string, lits []span) string {
	var b strings.Builder
	at := 0
	for i, l := range lits {
		b.WriteString(sql[at:l.start])
		switch l.class {
		case IntegerLiteral:
			b.WriteString([]string{"42", "1"}[i%2])
		case NumericLiteral:
			// It may follow a word directly (BY.0), so it must not
			// start with a digit.
			b.WriteString(".5")
		case StringLiteral:
			b.WriteString([]string{`'x''y -- /* $$ ;'`, `'1'`}[i%2])
		case EscapeStringLiteral:
			b.WriteString(`E'a\'b'`)
		case BitStringLiteral:
			b.WriteString(`B'10'`)
		case HexStringLiteral:
			b.WriteString(`X'1F'`)
		case UnicodeStringLiteral:
			b.WriteString(`U&'zz'`)
		case DollarStringLiteral:
			b.WriteString(`$$v;'$$`)
		}
		at = l.end
	}
	b.WriteString(sql[at:])
	return b.String()
}

func describeAll(stmts []*Statement) string {
	var b strings.Builder
	for _, st := range stmts {
		b.WriteString(st.SQL + "\n" + strings.Join(st.Describe(params("1", "42")), "\n") + "\n")
	}
	return b.String()
}
