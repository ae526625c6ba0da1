package planner

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/tesseradb/tessera/topo"
)

// planStats plans in and reports the statements and whether the cache
// answered.
func planStats(t *testing.T, p *Planner, rev int64, in Input) ([]*Statement, bool) {
	t.Helper()
	before := p.Stats().Hits
	stmts, err := p.Plan(testTop(t), rev, testSchema, in)
	if err != nil {
		t.Fatalf("%q: %v", in.SQL, err)
	}
	return stmts, p.Stats().Hits > before
}

func testTop(t testing.TB) *topo.Topology { return loadTopology(t, "store_xxhash.json") }

func TestCacheRoutesByNewLiteral(t *testing.T) {
	p := New(64)
	a, hit := planStats(t, p, 1, store("SELECT * FROM customers WHERE customer_id = 42"))
	if hit || summary(a[0], nil) != "select shard customer-shard-1" {
		t.Fatalf("first: hit %v, %s", hit, summary(a[0], nil))
	}
	b, hit := planStats(t, p, 1, store("SELECT  *  FROM customers -- another comment\n WHERE customer_id = 1"))
	if !hit {
		t.Fatal("same shape, other literal: not a cache hit")
	}
	if got := summary(b[0], nil); got != "select shard customer-shard-2" {
		t.Errorf("the cached plan routes by the old literal: %s", got)
	}
	if b[0].SQL != "SELECT  *  FROM customers -- another comment\n WHERE customer_id = 1" || b[0].Keys[0].Literal != "1" {
		t.Errorf("not bound to the new text: %q %+v", b[0].SQL, b[0].Keys[0])
	}
	if a[0].Keys[0].Literal != "42" || summary(a[0], nil) != "select shard customer-shard-1" {
		t.Error("binding a hit changed the cached statement")
	}
	c, hit := planStats(t, p, 1, store("SELECT * FROM customers WHERE customer_id = 42"))
	if !hit || c[0] != a[0] {
		t.Error("the same text does not get the cached statement itself")
	}
}

func TestCacheScannerTraps(t *testing.T) {
	p := New(64)
	first := "SELECT * FROM customers WHERE name = '42 -- x' AND customer_id = 42 AND note = $$1; /* $$"
	second := "SELECT * FROM customers WHERE name = 'a /* b''' AND customer_id = 1 AND note = $$ -- '$$"
	if _, hit := planStats(t, p, 1, store(first)); hit {
		t.Fatal("hit on an empty cache")
	}
	s, hit := planStats(t, p, 1, store(second))
	if !hit || summary(s[0], nil) != "select shard customer-shard-2" || s[0].Keys[0].Literal != "1" {
		t.Errorf("hit %v, %s, keys %+v", hit, summary(s[0], nil), s[0].Keys)
	}
	// A different literal class is a different shape.
	if s, hit := planStats(t, p, 1, store("SELECT * FROM customers WHERE name = 42 AND customer_id = 42 AND note = $$1$$")); hit {
		t.Errorf("string and number literals share a plan: %s", summary(s[0], nil))
	}
	// Dollar-quoted routing keys and statements split around them.
	sql := "SELECT $x$;$x$; SELECT * FROM customers WHERE customer_id = $$42$$ ; SELECT 'a;b'"
	planStats(t, p, 1, store(sql))
	stmts, hit := planStats(t, p, 1, store("SELECT $x$;;;$x$; SELECT * FROM customers WHERE customer_id = $$1$$ ; SELECT ';'"))
	if !hit || len(stmts) != 3 {
		t.Fatalf("hit %v, %d statements", hit, len(stmts))
	}
	want := []string{"SELECT $x$;;;$x$", "SELECT * FROM customers WHERE customer_id = $$1$$", "SELECT ';'"}
	for i, st := range stmts {
		if st.SQL != want[i] {
			t.Errorf("statement %d: %q, want %q", i, st.SQL, want[i])
		}
	}
	if got := summary(stmts[1], nil); got != "select shard customer-shard-2" {
		t.Errorf("dollar-quoted key: %s", got)
	}
}

func TestCacheNegativeLiterals(t *testing.T) {
	mod := loadTopology(t, "store_modulo.json")
	p := New(64)
	plan := func(sql string) (*Statement, bool) {
		before := p.Stats().Hits
		st := planOne(t, p, mod, store(sql))
		return st, p.Stats().Hits > before
	}
	// Modulo refuses negative keys, so no row has one: a read of one
	// goes to the group's first shard and finds nothing, as on Postgres.
	st, _ := plan("SELECT * FROM customers WHERE customer_id = -6")
	if got := summary(st, nil); got != "select shard customer-shard-1" {
		t.Errorf("-6 by modulo: %s", got)
	}
	if st, hit := plan("SELECT * FROM customers WHERE customer_id = 6"); hit || summary(st, nil) != "select shard customer-shard-2" {
		t.Errorf("6 shares the plan of -6 (hit %v): %s", hit, summary(st, nil))
	}
	if st, hit := plan("SELECT * FROM customers WHERE customer_id = -2"); !hit || summary(st, nil) != "select shard customer-shard-1" {
		t.Errorf("-2: hit %v, %s", hit, summary(st, nil))
	}
	if st, _ := plan("INSERT INTO customers (customer_id) VALUES (-5)"); summary(st, nil) != "insert error 22003" {
		t.Errorf("INSERT of -5 by modulo: %s", summary(st, nil))
	}
	if st, _ := plan("SELECT * FROM customers WHERE customer_id = - - 6"); summary(st, nil) != "select shard customer-shard-2" {
		t.Errorf("- - 6 is 6: %s", summary(st, nil))
	}
	if st, _ := plan("SELECT * FROM customers WHERE customer_id = 3 - -1"); summary(st, nil) != "select scatter customer-shard-1,customer-shard-2" {
		t.Errorf("an expression is not a key: %s", summary(st, nil))
	}
}

func TestCacheKeyParts(t *testing.T) {
	p := New(64)
	sql := "SELECT * FROM customers WHERE customer_id = $1"
	planStats(t, p, 1, store(sql))
	if _, hit := planStats(t, p, 1, store(sql)); !hit {
		t.Fatal("no hit on the same input")
	}
	for name, in := range map[string]Input{
		"database":    {SQL: sql, Database: "other", SearchPath: []string{"public"}},
		"search path": {SQL: sql, Database: "store", SearchPath: []string{"app", "public"}},
		"param types": {SQL: sql, Database: "store", SearchPath: []string{"public"}, ParamOIDs: []uint32{23}},
	} {
		if _, hit := planStats(t, p, 1, in); hit {
			t.Errorf("%s not in the key", name)
		}
	}
	if _, hit := planStats(t, p, 2, store(sql)); hit {
		t.Error("a new topology revision hit an old plan")
	}
	if _, hit := planStats(t, p, 1, store(sql)); hit {
		t.Error("an old revision's plan survived a newer revision")
	}
	p.Invalidate()
	if _, hit := planStats(t, p, 1, store(sql)); hit {
		t.Error("a plan survived Invalidate")
	}
}

func TestCacheExactText(t *testing.T) {
	p := New(64)
	// A SET plan holds its value: the same shape must not share it.
	planStats(t, p, 1, store("SET statement_timeout = 1000"))
	st, hit := planStats(t, p, 1, store("SET statement_timeout = 2000"))
	if hit || st[0].Setting.Value != "2000" {
		t.Errorf("SET shared a plan: hit %v, value %q", hit, st[0].Setting.Value)
	}
	if _, hit := planStats(t, p, 1, store("SET statement_timeout = 2000")); !hit {
		t.Error("the exact text of a SET is not cached")
	}
	// A literal that is no constant (the gid) makes the input exact-only.
	planStats(t, p, 1, store("PREPARE TRANSACTION 'a'"))
	if st, hit := planStats(t, p, 1, store("PREPARE TRANSACTION 'b'")); hit || st[0].Name != "b" {
		t.Errorf("PREPARE TRANSACTION shared a plan: hit %v, %q", hit, st[0].Name)
	}
	// Strings concatenated across a line break are one constant.
	planStats(t, p, 1, store("SELECT * FROM customers WHERE customer_id = '4'\n'2'"))
	if st, hit := planStats(t, p, 1, store("SELECT * FROM customers WHERE customer_id = '1'\n''")); hit || summary(st[0], nil) != "select shard customer-shard-2" {
		t.Errorf("concatenated strings: hit %v, %s", hit, summary(st[0], nil))
	}
	// Tokens the scanner does not model.
	for _, sql := range []string{"SELECT 1_000", "SELECT 0x2A", "SELECT 'unterminated"} {
		sc := new(scan)
		sc.run(sql)
		if !sc.odd {
			t.Errorf("%q: not odd", sql)
		}
	}
	// Comments and whitespace are not part of the shape.
	planStats(t, p, 1, store("SELECT /* a */ 1"))
	if _, hit := planStats(t, p, 1, store("SELECT\n\t/* bbb */ 2")); !hit {
		t.Error("comments or line breaks split shapes")
	}
}

func TestCacheEviction(t *testing.T) {
	p := New(32)
	for i := 0; i < 500; i++ {
		planStats(t, p, 1, store(fmt.Sprintf("SELECT c%d FROM customers WHERE customer_id = 1", i)))
	}
	if n := p.Stats().Entries; n > 32 || n < 16 {
		t.Errorf("%d entries for a capacity of 32", n)
	}
	p = New(0)
	planStats(t, p, 1, store("SELECT 1"))
	if _, hit := planStats(t, p, 1, store("SELECT 1")); hit || p.Stats() != (Stats{}) {
		t.Error("New(0) caches")
	}
}

// TestCacheConcurrent plans and routes from many goroutines (run with
// -race): every session must see its own literal's route.
func TestCacheConcurrent(t *testing.T) {
	p := New(8)
	top := testTop(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				v, want := "42", "customer-shard-1"
				if (g+i)%2 == 0 {
					v, want = "1", "customer-shard-2"
				}
				sql := fmt.Sprintf("SELECT c%d FROM customers WHERE customer_id = %s", i%20, v)
				stmts, err := p.Plan(top, int64(1+i/100), testSchema, store(sql))
				if err != nil {
					t.Error(err)
					return
				}
				if shards, err := stmts[0].Shards(nil); err != nil || shards[0] != want {
					t.Errorf("%s: %v %v", sql, shards, err)
					return
				}
				if i%50 == 0 {
					p.Invalidate()
				}
			}
		}()
	}
	wg.Wait()
}

func TestAllocations(t *testing.T) {
	p := New(64)
	top := testTop(t)
	a := store("SELECT * FROM customers WHERE customer_id = 42")
	b := store("SELECT * FROM customers WHERE customer_id = 1")
	x := store("SELECT * FROM customers WHERE customer_id = $1")
	for _, in := range []Input{a, x} {
		if _, err := p.Plan(top, 1, testSchema, in); err != nil {
			t.Fatal(err)
		}
	}
	if !raceEnabled {
		if n := testing.AllocsPerRun(100, func() { p.Plan(top, 1, testSchema, a) }); n != 0 {
			t.Errorf("hit on the planned text: %v allocations", n)
		}
		if n := testing.AllocsPerRun(100, func() { p.Plan(top, 1, testSchema, b) }); n > 1 {
			t.Errorf("hit with another literal: %v allocations", n)
		}
	}
	st, _ := p.Plan(top, 1, testSchema, b)
	if n := testing.AllocsPerRun(100, func() { st[0].Shards(nil) }); n != 0 {
		t.Errorf("Shards of a literal key: %v allocations", n)
	}
	st, _ = p.Plan(top, 1, testSchema, x)
	args := params(int64(42))
	if n := testing.AllocsPerRun(100, func() { st[0].Shards(args) }); n != 0 {
		t.Errorf("Shards of a parameter key: %v allocations", n)
	}
}

func TestScanShape(t *testing.T) {
	for sql, want := range map[string]string{
		"SELECT  1 ,'a''b'  FROM t":           "SELECT #1 ,#3 FROM t",
		"select E'\\'' , B'01', X'1f', U&'x'": "select #4 , #5, #6, #7",
		"x = $1 -- c\n AND y=-2.5e3":          "x = $1 AND y=-#2",
		"'a' -- c\n'b' 1\n'c' 'd'\n\nE'e'":    "#3\n#3 #1 #3 #3 #4",
		"a/*x/*y*/z*/b .5 5. $a$ $ $a$ $$":    "a b #2 #2 #8 #8",
		`"a""b" "x y"`:                        `"a""b" "x y"`,
		"a$1 $1a 'x'\n'y'":                    "a$1 $1a #3\n#3",
		"U&\"x\" u&'y' n'z' xe'w'":            "U&\"x\" #7 n#3 xe#3",
	} {
		sc := new(scan)
		sc.run(sql)
		got := strings.Map(func(r rune) rune {
			if r == 0 {
				return '#'
			}
			if r < 16 && r != '\n' {
				return '0' + r
			}
			return r
		}, string(sc.shape))
		if got != want {
			t.Errorf("%q:\n got %q\nwant %q", sql, got, want)
		}
	}
}
