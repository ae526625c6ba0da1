package planner

import (
	"testing"

	"github.com/tesseradb/tessera/router/copysplit"
)

// TestCopyIntoOptions: the options of COPY FROM STDIN into a sharded
// table, in both syntaxes, become the splitter's, with Postgres's
// defaults; what the splitter cannot follow is refused.
func TestCopyIntoOptions(t *testing.T) {
	top := loadTopology(t, "store_xxhash.json")
	p := New(0)
	csv := copysplit.Options{Format: copysplit.CSV, Delimiter: ',', Quote: '"', Escape: '"', Null: "", Columns: 2, Key: 0}
	cases := []struct {
		sql  string
		want copysplit.Options
		err  bool
	}{
		{"COPY customers FROM STDIN", copysplit.Options{Format: copysplit.Text, Delimiter: '\t', Quote: '"', Escape: '"', Null: `\N`, Columns: 2, Key: 0}, false},
		{"COPY customers (name, customer_id) FROM STDIN (FORMAT csv)", copysplit.Options{Format: copysplit.CSV, Delimiter: ',', Quote: '"', Escape: '"', Columns: 2, Key: 1}, false},
		{"COPY customers FROM STDIN WITH CSV HEADER DELIMITER ';' QUOTE '''' ESCAPE '\\' NULL 'x' FORCE NOT NULL customer_id",
			copysplit.Options{Format: copysplit.CSV, Delimiter: ';', Quote: '\'', Escape: '\\', Null: "x", Header: true, ForceNotNull: true, Columns: 2}, false},
		{"COPY customers FROM STDIN (FORMAT csv, HEADER match, FORCE_NULL (name))", func() copysplit.Options { o := csv; o.Header = true; return o }(), false},
		{"COPY customers FROM STDIN (FORMAT csv, FORCE_NULL (customer_id))", func() copysplit.Options { o := csv; o.ForceNull = true; return o }(), false},
		{"COPY customers FROM STDIN (FORMAT binary)", copysplit.Options{Format: copysplit.Binary, Delimiter: '\t', Quote: '"', Escape: '"', Null: `\N`, Columns: 2}, false},
		{"COPY customers FROM STDIN (ENCODING 'latin1')", copysplit.Options{}, true},
		{"COPY customers FROM STDIN (FORMAT csv, QUOTE E'\\n')", copysplit.Options{}, true},
	}
	for _, c := range cases {
		st := planOne(t, p, top, store(c.sql))
		if st.Err != nil || st.CopyInto == nil {
			t.Fatalf("%s: %v", c.sql, st.Err)
		}
		if got := st.CopyInto; (got.OptionsErr != nil) != c.err || !c.err && got.Options != c.want {
			t.Errorf("%s:\n got %+v (%v)\nwant %+v", c.sql, got.Options, got.OptionsErr, c.want)
		}
	}
}
