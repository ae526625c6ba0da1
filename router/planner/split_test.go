package planner

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/pgerr"
)

// part renders an InsertPart as "shard rows=[..] params=[..]: SQL".
func (p InsertPart) String() string {
	return fmt.Sprintf("%s rows=%v params=%v: %s", p.Shard, p.Rows, p.Params, p.SQL)
}

func TestSplitInsertText(t *testing.T) {
	for _, c := range []struct {
		sql    string
		shards []string
		want   []string
	}{
		{
			"INSERT INTO t (id, v) VALUES (1, 'a'), (2, 'b'), (3, 'c')",
			[]string{"A", "B", "A"},
			[]string{
				"A rows=[0 2] params=[]: INSERT INTO t (id, v) VALUES (1, 'a'), (3, 'c')",
				"B rows=[1] params=[]: INSERT INTO t (id, v) VALUES (2, 'b')",
			},
		},
		{
			// The part order follows the first row of each shard; the text
			// after the last row is kept.
			"insert into t(id,v) values ($1,$2),($3,$4) , ( $5 , $6 ) on conflict (id) do update set v = excluded.v returning id, v",
			[]string{"B", "A", "B"},
			[]string{
				"B rows=[0 2] params=[1 2 5 6]: insert into t(id,v) values ($1,$2), ( $3 , $4 ) on conflict (id) do update set v = excluded.v returning id, v",
				"A rows=[1] params=[3 4]: insert into t(id,v) values ($1,$2) on conflict (id) do update set v = excluded.v returning id, v",
			},
		},
		{
			// Parameters after the rows, shared by every part, and a
			// parameter used in two rows; they are numbered by first
			// appearance.
			"INSERT INTO t (id, v) VALUES ($2, $1), ($3, $1) ON CONFLICT (id) DO UPDATE SET v = $4",
			[]string{"A", "B"},
			[]string{
				"A rows=[0] params=[2 1 4]: INSERT INTO t (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = $3",
				"B rows=[1] params=[3 1 4]: INSERT INTO t (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = $3",
			},
		},
		{
			// Parentheses, strings and $n look-alikes inside rows; what is
			// between rows (commas, comments) is not kept.
			"INSERT INTO t (id, v) VALUES (1, (('x)' || $1) || ')')), /* (2) */ (2, $$a), ($9$$) -- c\n, (3, f($2, ARRAY[(1)]::int[]))",
			[]string{"A", "B", "B"},
			[]string{
				"A rows=[0] params=[1]: INSERT INTO t (id, v) VALUES (1, (('x)' || $1) || ')'))",
				"B rows=[1 2] params=[2]: INSERT INTO t (id, v) VALUES (2, $$a), ($9$$), (3, f($1, ARRAY[(1)]::int[]))",
			},
		},
		{
			// A parenthesized VALUES keeps its closing parenthesis.
			"INSERT INTO t (VALUES (1, -2), (3, DEFAULT))",
			[]string{"A", "B"},
			[]string{
				"A rows=[0] params=[]: INSERT INTO t (VALUES (1, -2))",
				"B rows=[1] params=[]: INSERT INTO t (VALUES (3, DEFAULT))",
			},
		},
	} {
		sp, err := SplitInsert(c.sql, c.shards)
		if err != nil {
			t.Errorf("%s: %v", c.sql, err)
			continue
		}
		var got []string
		for _, p := range sp.Parts {
			got = append(got, p.String())
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.sql, got, c.want)
		}
		for r, at := range sp.RowPart {
			if sp.Parts[at].Shard != c.shards[r] {
				t.Errorf("%s: row %d in part %s, want %s", c.sql, r, sp.Parts[at].Shard, c.shards[r])
			}
		}
	}
}

func TestSplitInsertRefused(t *testing.T) {
	for sql, want := range map[string]string{
		"WITH x AS (SELECT 1) INSERT INTO t (id) VALUES (1), (2)":                                          "with a WITH clause",
		"INSERT INTO t (id) SELECT 1":                                                                      "from a SELECT",
		"INSERT INTO t (id) VALUES (1), (2) LIMIT 1":                                                       "with WITH, ORDER BY, LIMIT or OFFSET on its VALUES",
		"INSERT INTO t (id) VALUES (1), (2) RETURNING (SELECT 1)":                                          "with a subquery in RETURNING",
		"INSERT INTO t (id) VALUES (1), (2) ON CONFLICT DO NOTHING RETURNING id":                           "with ON CONFLICT DO NOTHING and RETURNING",
		"INSERT INTO t (id) VALUES (1), (2) ON CONFLICT (id) DO UPDATE SET v = 1 WHERE false RETURNING id": "with ON CONFLICT DO UPDATE ... WHERE and RETURNING",
		"SELECT 1": "not a single INSERT",
	} {
		_, err := SplitInsert(sql, []string{"A", "B"})
		if err == nil || pgerr.Code(err) != pgerr.FeatureNotSupported || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want 0A000 with %q", sql, err, want)
		}
	}
	// Without RETURNING, DO NOTHING splits: the counts add up.
	if _, err := SplitInsert("INSERT INTO t (id) VALUES (1), (2) ON CONFLICT DO NOTHING", []string{"A", "B"}); err != nil {
		t.Error(err)
	}
}

func TestSplitInsertPlanned(t *testing.T) {
	xx := loadTopology(t, "store_xxhash.json")
	// 42 goes to customer-shard-1, 1 to customer-shard-2.
	for _, c := range []struct {
		sql    string
		params Params
		want   []string
		err    string
	}{
		{
			sql: "INSERT INTO customers (customer_id, name) VALUES (42, 'a'), (1, 'b'), (42, 'c') RETURNING customer_id",
			want: []string{
				"customer-shard-1 rows=[0 2] params=[]: INSERT INTO customers (customer_id, name) VALUES (42, 'a'), (42, 'c') RETURNING customer_id",
				"customer-shard-2 rows=[1] params=[]: INSERT INTO customers (customer_id, name) VALUES (1, 'b') RETURNING customer_id",
			},
		},
		{
			sql:    "INSERT INTO customers (customer_id, name) VALUES ($1, $2), ($3, $4)",
			params: params(int64(1), "a", int64(42), "b"),
			want: []string{
				"customer-shard-2 rows=[0] params=[1 2]: INSERT INTO customers (customer_id, name) VALUES ($1, $2)",
				"customer-shard-1 rows=[1] params=[3 4]: INSERT INTO customers (customer_id, name) VALUES ($1, $2)",
			},
		},
		{
			sql:    "INSERT INTO customers (customer_id, name) VALUES ($1, $2), ($3, $4)",
			params: params(int64(1), "a", nil, "b"),
			err:    "23502",
		},
		{
			sql: "INSERT INTO customers (customer_id) VALUES (1), (42) ON CONFLICT DO NOTHING RETURNING *",
			err: "0A000",
		},
	} {
		st := planOne(t, New(0), xx, store(c.sql))
		if _, err := st.Shards(c.params); err != ErrSplitInsert && c.err == "" {
			t.Errorf("%s: Shards: %v, want ErrSplitInsert", c.sql, err)
			continue
		}
		sp, err := st.SplitInsert(c.params)
		if c.err != "" {
			if pgerr.Code(err) != c.err {
				t.Errorf("%s: got %v, want %s", c.sql, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.sql, err)
			continue
		}
		var got []string
		for _, p := range sp.Parts {
			got = append(got, p.String())
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.sql, got, c.want)
		}
	}

	// A cached plan of the same shape splits its own text.
	p := New(100)
	planOne(t, p, xx, store("INSERT INTO customers (customer_id, name) VALUES (42, 'a'), (42, 'b')"))
	st := planOne(t, p, xx, store("INSERT INTO customers (customer_id, name) VALUES (1, 'x'), (42, 'y')"))
	sp, err := st.SplitInsert(nil)
	if err != nil || len(sp.Parts) != 2 || sp.Parts[0].SQL != "INSERT INTO customers (customer_id, name) VALUES (1, 'x')" ||
		sp.Parts[1].SQL != "INSERT INTO customers (customer_id, name) VALUES (42, 'y')" {
		t.Errorf("cached shape: %v %v", sp, err)
	}

	// EXPLAIN (TESSERA) shows the parts.
	st = planOne(t, New(0), xx, store("EXPLAIN (TESSERA) INSERT INTO customers (customer_id) VALUES ($1), ($2)"))
	got := strings.Join(st.Describe(params(int64(42), int64(1))), "\n")
	want := "Split by row across shards\n" +
		"Shard customer-shard-1 (rows 1; $1 = $1): INSERT INTO customers (customer_id) VALUES ($1)\n" +
		"Shard customer-shard-2 (rows 2; $1 = $2): INSERT INTO customers (customer_id) VALUES ($1)"
	if !strings.HasSuffix(got, want) {
		t.Errorf("explain:\n%s\nwant suffix\n%s", got, want)
	}
}
