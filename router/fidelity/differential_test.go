package fidelity_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestDifferential loads one schema and data set into a plain Postgres
// database and, through the router, into a cluster where items and events
// are sharded by k over four shards (shard-3's key range holds none of the
// keys: an empty shard), kinds is a reference table, notes is unsharded,
// and six more tables are sharded by keys of other types.
// Every statement of testdata/corpus.sql runs on both, through the simple
// and the extended protocol; the router must answer exactly as the plain
// database (columns, type OIDs, typmods, command tag, SQLSTATE, rows) or
// refuse with 0A000. Refusals are listed by reason; any other difference is
// a wrong answer and fails the test (issue #16, "The proof").
func TestDifferential(t *testing.T) {
	corpus := readCorpus(t, filepath.Join("testdata", "corpus.sql"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tessera, ref := diffDatabases(t, ctx)

	modes := []struct {
		name string
		mode pgx.QueryExecMode
	}{{"simple", pgx.QueryExecModeSimpleProtocol}, {"extended", pgx.QueryExecModeCacheStatement}}
	started := time.Now()
	refusals := map[string][]string{}
	answered, unordered := 0, 0
	// Each protocol runs the whole corpus in turn, so that a transaction
	// block in it runs once per protocol, as written.
	for _, m := range modes {
		// afterRefusal: a refusal left the router's session where the
		// reference's is not: its transaction failed, or the cursor or
		// prepared statement it would have made does not exist.
		afterRefusal := false
		for _, st := range corpus {
			sql := st.String()
			want := ask(ctx, ref, st.sql, m.mode, st.args...)
			got := ask(ctx, tessera, st.sql, m.mode, st.args...)
			o := orderOf(ctx, ref, m.mode, st, want)
			refused := got.code == "0A000" && want.code != "0A000"
			if afterRefusal && !refused && want.code == "" && consequences[got.code] {
				if m.mode == pgx.QueryExecModeSimpleProtocol {
					r := "after a refusal earlier in the transaction or session (" + got.code + ")"
					refusals[r] = append(refusals[r], sql)
				}
				continue
			}
			afterRefusal = refused
			if refused {
				if m.mode == pgx.QueryExecModeSimpleProtocol {
					r := reason(got.msg)
					refusals[r] = append(refusals[r], sql)
				}
				continue
			}
			if d := mismatch(want, got, o); d != "" {
				t.Errorf("WRONG ANSWER (%s protocol): %s\n  %s", m.name, sql, d)
				continue
			}
			if m.mode == pgx.QueryExecModeSimpleProtocol {
				answered++
				if o.sorted && o.keys == nil && want.code == "" {
					unordered++
				}
			}
		}
	}
	reasons := make([]string, 0, len(refusals))
	for r := range refusals {
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b string) int { return len(refusals[b]) - len(refusals[a]) })
	var report strings.Builder
	fmt.Fprintf(&report, "%d statements in %v: %d answered as Postgres does (%d with an ORDER BY the harness cannot read, compared without order), %d refused with 0A000:\n",
		len(corpus), time.Since(started).Round(time.Millisecond), answered, unordered, len(corpus)-answered)
	for _, r := range reasons {
		fmt.Fprintf(&report, "%4d  %s\n", len(refusals[r]), r)
		if testing.Verbose() {
			for _, sql := range refusals[r] {
				fmt.Fprintf(&report, "        %s\n", sql)
			}
		}
	}
	t.Log(report.String())
}

// statement is one corpus entry: SQL and its parameters' values.
type statement struct {
	sql  string
	args []any
}

func (s statement) String() string {
	if s.args == nil {
		return s.sql
	}
	list, _ := json.Marshal(s.args)
	return fmt.Sprintf("%s -- args: %s", s.sql, list)
}

// readCorpus reads statements, each ending with ";" at the end of a line,
// or with "; -- args: [json values]" for its parameters; lines starting
// with "--" are comments.
func readCorpus(t *testing.T, path string) []statement {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []statement
	var cur strings.Builder
	for _, line := range strings.Split(string(text), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		var args []any
		if sql, list, ok := strings.Cut(trimmed, "; -- args: "); ok {
			d := json.NewDecoder(strings.NewReader(list))
			d.UseNumber()
			if err := d.Decode(&args); err != nil {
				t.Fatalf("%s: %s: %v", path, line, err)
			}
			for i, a := range args {
				if n, ok := a.(json.Number); ok {
					if args[i], err = n.Int64(); err != nil {
						args[i], _ = n.Float64()
					}
				}
			}
			trimmed = sql + ";"
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(trimmed)
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, statement{sql: strings.TrimSuffix(cur.String(), ";"), args: args})
			cur.Reset()
		}
	}
	if cur.Len() > 0 {
		t.Fatalf("%s: the last statement does not end with ;", path)
	}
	seen := map[string]bool{}
	for _, s := range out {
		if control.MatchString(s.sql) {
			continue // transaction control and settings repeat
		}
		if seen[s.String()] {
			t.Fatalf("%s: %s is there twice", path, s)
		}
		seen[s.String()] = true
	}
	return out
}

// consequences are the errors a refusal causes later: a failed
// transaction, a prepared statement or a cursor that was not made.
var consequences = map[string]bool{"25P02": true, "26000": true, "34000": true}

var control = regexp.MustCompile(`^(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|SET|RESET|CLOSE|DEALLOCATE)\b`)

var parenthesized = regexp.MustCompile(` \([^()]*\)$`)

// reason is a refusal's message without its particulars (the group, the
// tables), which name where rather than why.
func reason(msg string) string {
	return parenthesized.ReplaceAllString(msg, "")
}

func mustExec(t *testing.T, conn *pgx.Conn, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// checkSpread makes sure the data is spread as the test means it to be:
// sharded rows on shard-0, -1 and -2, none on shard-3.
func checkSpread(t *testing.T, ctx context.Context, shard func(string) *pgx.Conn) {
	t.Helper()
	for _, s := range []string{"shard-0", "shard-1", "shard-2", "shard-3"} {
		var items, others int
		if err := shard(s).QueryRow(ctx, `SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM events) + (SELECT count(*) FROM accounts)
			+ (SELECT count(*) FROM pads) + (SELECT count(*) FROM devices) + (SELECT count(*) FROM ledger)
			+ (SELECT count(*) FROM moments) + (SELECT count(*) FROM days)`).Scan(&items, &others); err != nil {
			t.Fatal(err)
		}
		if s == "shard-3" && items+others > 0 || s != "shard-3" && items == 0 {
			t.Fatalf("%s holds %d items and %d other sharded rows: the test means shard-3 empty and the others not", s, items, others)
		}
	}
}

// schema is the data set's tables: items sharded by k, events colocated
// with it, kinds a reference table, notes unsharded; and an aggregate.
func schema() []string {
	return []string{
		`CREATE TABLE items (k bigint PRIMARY KEY, small int2, qty int4, big int8, price numeric(12,2),
			ratio float8, name text, flag bool, day date, at timestamptz, uid uuid, doc jsonb, tags text[], kind int)`,
		`CREATE TABLE events (k bigint NOT NULL, seq int NOT NULL, amount numeric, note text, kind int, PRIMARY KEY (k, seq))`,
		`CREATE TABLE kinds (code int PRIMARY KEY, label text)`,
		`CREATE TABLE notes (id int PRIMARY KEY, k bigint, body text)`,
		// Tables sharded by keys of other types, each by its own index.
		`CREATE TABLE accounts (code text PRIMARY KEY, owner bigint, note varchar(10))`,
		`CREATE TABLE pads (tag char(6) PRIMARY KEY, v int)`,
		`CREATE TABLE devices (id uuid PRIMARY KEY, v int)`,
		`CREATE TABLE ledger (n numeric PRIMARY KEY, v int)`,
		`CREATE TABLE moments (at timestamptz PRIMARY KEY, v int)`,
		`CREATE TABLE days (day date PRIMARY KEY, v int)`,
		// Text under the C collation and two ICU ones (the shards and the
		// reference are one build: the same ICU), bpchar, an enum, arrays
		// and citext, in a table colocated with items. citext lives in a
		// schema of its own, off the search path except where the corpus
		// puts it there: its min and max aggregates, once visible, make
		// the planner refuse every min and max across shards (it cannot
		// tell them from the built-ins without the arguments' types), and
		// the harness would no longer check the router's merges of them.
		`CREATE SCHEMA ext`,
		`CREATE EXTENSION citext SCHEMA ext`,
		`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`,
		`CREATE TABLE labels (k bigint PRIMARY KEY, c text COLLATE "C", icu text COLLATE "en-x-icu", sv text COLLATE "sv-x-icu",
			pad char(4), mood mood, nums int[], words text[], ci ext.citext)`,
		// Sequences, which live on the authoritative shard.
		`CREATE SEQUENCE seq_one`,
		`CREATE SEQUENCE seq_many`,
		// A user's aggregate, which the parser cannot tell from a plain
		// function.
		`CREATE AGGREGATE int_total (int) (sfunc = int4pl, stype = int, initcond = '0')`,
	}
}

// data is the rows, as INSERT statements of literals: NULLs, duplicates
// and ties in every column, large values, keys with no events (empty
// groups) and kinds no item has.
func data() []string {
	names := []string{"'alpha'", "'beta'", "'Gamma'", "'delta'", "''", "NULL", "'beta'"}
	null := func(cond bool, v string) string {
		if cond {
			return "NULL"
		}
		return v
	}
	// Negative and positive, and int8's extremes.
	big := func(k int) int64 {
		switch k {
		case 47:
			return math.MaxInt64
		case 48:
			return math.MinInt64
		}
		return int64(1-2*(k%2)) * int64(k) * 1_000_000_000_007
	}
	var out []string
	for k := 1; k <= 48; k++ {
		name := names[k%len(names)]
		out = append(out, fmt.Sprintf(
			"INSERT INTO items VALUES (%d, %s, %s, %d, %s, %s, %s, %s, DATE '2024-01-01' + %d, TIMESTAMPTZ '2024-03-01 10:00:00+00' + interval '%d hours', '%08x-0000-4000-8000-%012x', %s, %s, %d)",
			k, null(k%7 == 0, fmt.Sprint(k%5-2)), null(k%9 == 0, fmt.Sprint((k*7)%11)), big(k),
			null(k%8 == 0, fmt.Sprintf("%d.%02d", k*3%17, k*13%100)), null(k%10 == 0, fmt.Sprintf("%g", float64(k%6)/4)),
			name, null(k%10 == 5, fmt.Sprint(k%3 == 0)), k%6, k*5, (k*2654435761)%(1<<32), k,
			null(k%11 == 0, fmt.Sprintf(`'{"k": %d, "even": %t, "tag": %q}'`, k, k%2 == 0, fmt.Sprint("t", k%3))),
			null(k%12 == 0, fmt.Sprintf("ARRAY['t%d', 't%d']", k%3, k%4)), k%4))
		for seq := 1; seq <= k%4; seq++ {
			out = append(out, fmt.Sprintf("INSERT INTO events VALUES (%d, %d, %s, %s, %d)",
				k, seq, null((k+seq)%6 == 0, fmt.Sprintf("%d.5", (k*seq)%13)), names[(k+seq)%len(names)], (k+seq)%5))
		}
	}
	// Shard keys must be literals: times and dates written out.
	march := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := 1; i <= 24; i++ {
		out = append(out,
			fmt.Sprintf("INSERT INTO accounts VALUES ('acct-%d', %d, %s)", i, i%5, null(i%4 == 0, fmt.Sprintf("'n%d'", i%3))),
			fmt.Sprintf("INSERT INTO pads VALUES ('t%d', %d)", i, i),
			fmt.Sprintf("INSERT INTO devices VALUES ('%08x-1111-4222-8333-%012x', %d)", i*77777, i, i),
			fmt.Sprintf("INSERT INTO ledger VALUES (%d.%d, %d)", i, i%4*25, i),
			fmt.Sprintf("INSERT INTO moments VALUES ('%s', %d)", march.Add(time.Duration(i*7)*time.Hour+30*time.Minute).Format("2006-01-02 15:04:05-07"), i),
			fmt.Sprintf("INSERT INTO days VALUES ('%s', %d)", march.AddDate(0, -2, i*11).Format("2006-01-02"), i))
	}
	words := []string{"'apple'", "'Apple'", "'Äpfel'", "'zebra'", "'Zebra'", "'éclair'", "'eclair'", "''", "NULL",
		"'a b'", "'ab'", "'ö'", "'z'", "'1'", "'-'", "'apple'"}
	moods := []string{"'sad'", "'ok'", "'happy'", "NULL", "'ok'"}
	pads := []string{"'ab'", "'ab  '", "'x'", "NULL", "' a'", "''"}
	arrays := []string{"'{1,2}'", "'{}'", "NULL", "'{NULL,1}'", "'{10}'", "'{1,2}'", "'{2}'"}
	for k := 1; k <= 48; k++ {
		out = append(out, fmt.Sprintf("INSERT INTO labels VALUES (%d, %s, %s, %s, %s, %s, %s, %s, %s)", k,
			words[k%len(words)], words[(k+3)%len(words)], words[(k*5)%len(words)], pads[k%len(pads)], moods[k%len(moods)],
			arrays[k%len(arrays)], null(k%5 == 0, fmt.Sprintf("ARRAY[%s, %s]", words[(k+1)%7], words[k%3])),
			[]string{"'Hello'", "'hello'", "'HELLO'", "'world'", "NULL"}[k%5]))
	}
	out = append(out, "INSERT INTO kinds VALUES (0, 'zero'), (1, 'one'), (2, 'two'), (9, 'nine'), (10, NULL)")
	for id := 1; id <= 10; id++ {
		out = append(out, fmt.Sprintf("INSERT INTO notes VALUES (%d, %d, %s)", id, id*5, names[id%len(names)]))
	}
	return out
}
