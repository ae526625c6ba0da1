package planner

import (
	"strings"
	"testing"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// tpchSchema is TPC-H's catalog for the planner: columns, and types
// close enough (keys int4, money numeric(15,2), dates).
type tpchSchema struct{ fakeSchema }

var tpchCols = map[string][]string{
	"part":     {"p_partkey", "p_name", "p_mfgr", "p_brand", "p_type", "p_size", "p_container", "p_retailprice", "p_comment"},
	"supplier": {"s_suppkey", "s_name", "s_address", "s_nationkey", "s_phone", "s_acctbal", "s_comment"},
	"partsupp": {"ps_partkey", "ps_suppkey", "ps_availqty", "ps_supplycost", "ps_comment"},
	"customer": {"c_custkey", "c_name", "c_address", "c_nationkey", "c_phone", "c_acctbal", "c_mktsegment", "c_comment"},
	"orders":   {"o_orderkey", "o_custkey", "o_orderstatus", "o_totalprice", "o_orderdate", "o_orderpriority", "o_clerk", "o_shippriority", "o_comment"},
	"lineitem": {"l_orderkey", "l_partkey", "l_suppkey", "l_linenumber", "l_quantity", "l_extendedprice", "l_discount", "l_tax", "l_returnflag", "l_linestatus", "l_shipdate", "l_commitdate", "l_receiptdate", "l_shipinstruct", "l_shipmode", "l_comment"},
	"nation":   {"n_nationkey", "n_name", "n_regionkey", "n_comment"},
	"region":   {"r_regionkey", "r_name", "r_comment"},
}

func (s tpchSchema) ColumnNames(db, schema, table string) ([]string, error) {
	if c, ok := tpchCols[table]; ok {
		return c, nil
	}
	return nil, &pgerr.Error{Code: "42P01", Message: table}
}

func (s tpchSchema) ColumnType(db, schema, table, column string) (shardfunc.ColumnType, error) {
	switch column {
	case "p_partkey", "s_suppkey", "ps_partkey", "ps_suppkey", "c_custkey", "o_orderkey", "o_custkey", "l_orderkey", "l_partkey", "l_suppkey", "n_nationkey", "s_nationkey", "c_nationkey", "n_regionkey", "r_regionkey", "l_linenumber", "ps_availqty", "p_size", "o_shippriority":
		return shardfunc.Int4, nil
	case "o_orderdate", "l_shipdate", "l_commitdate", "l_receiptdate":
		return shardfunc.Date, nil
	case "l_quantity", "l_extendedprice", "l_discount", "l_tax", "ps_supplycost", "s_acctbal", "c_acctbal", "o_totalprice", "p_retailprice":
		return shardfunc.Numeric, nil
	}
	return shardfunc.Text, nil
}

func (s tpchSchema) ColumnTypmod(db, schema, table, column string) (int32, error) {
	return 15<<16 | 2 + 4, nil
}

// TestGatherTPCHQ9AndQ22: the two TPC-H queries gathering refused once:
// Q9 names its output column nation, which is also a table of the FROM
// clause inside it (a bare table name is a whole row, so usedColumns
// gave up), and Q22 sums c_acctbal through a derived table's output of
// the same name (the exactness proof followed the name into itself). Both
// are gathered; a bare name that is only a table's is still refused, and
// one that is both pulls all of that table's columns.
func TestGatherTPCHQ9AndQ22(t *testing.T) {
	top := loadTopology(t, "tpch.json")
	plan := func(sql string) *Statement {
		t.Helper()
		stmts, err := New(0).Plan(top, 1, tpchSchema{testSchema}, Input{SQL: sql, Database: "tpch", SearchPath: []string{"public"}})
		if err != nil {
			t.Fatal(err)
		}
		return stmts[0]
	}
	for name, sql := range map[string]string{
		"Q9":  `SELECT nation, o_year, sum(amount) AS sum_profit FROM ( SELECT n_name AS nation, extract(year FROM o_orderdate) AS o_year, l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity AS amount FROM part, supplier, lineitem, partsupp, orders, nation WHERE s_suppkey = l_suppkey AND ps_suppkey = l_suppkey AND ps_partkey = l_partkey AND p_partkey = l_partkey AND o_orderkey = l_orderkey AND s_nationkey = n_nationkey AND p_name LIKE '%green%') AS profit GROUP BY nation, o_year ORDER BY nation, o_year DESC`,
		"Q22": `SELECT cntrycode, count(*) AS numcust, sum(c_acctbal) AS totacctbal FROM ( SELECT substring(c_phone FROM 1 FOR 2) AS cntrycode, c_acctbal FROM customer WHERE substring(c_phone FROM 1 FOR 2) IN ('13', '31', '23', '29', '30', '18', '17') AND c_acctbal > (SELECT avg(c_acctbal) FROM customer WHERE c_acctbal > 0.00 AND substring(c_phone FROM 1 FOR 2) IN ('13', '31', '23', '29', '30', '18', '17')) AND NOT EXISTS (SELECT * FROM orders WHERE o_custkey = c_custkey)) AS custsale GROUP BY cntrycode ORDER BY cntrycode`,
	} {
		if st := plan(sql); st.Err != nil || st.Route != Gathered {
			t.Errorf("%s: route %v, err %v; want gathered", name, st.Route, st.Err)
		}
	}
	// A whole row of a table, named by its alias alone, is refused.
	if st := plan("SELECT p FROM part p JOIN lineitem l ON l.l_partkey = p.p_partkey"); st.Route == Gathered {
		t.Errorf("a whole-row reference was gathered")
	}
	// A name both a table's and a column's pulls every column of the table.
	st := plan("SELECT nation FROM nation, (SELECT n_name AS nation FROM part p JOIN lineitem l ON l.l_partkey = p.p_partkey JOIN nation ON n_nationkey = p.p_size) x")
	if st.Route != Gathered {
		t.Fatalf("route %v, err %v", st.Route, st.Err)
	}
	for _, tb := range st.Gather.Tables {
		if tb.Table.Table == "nation" && !strings.Contains(tb.Create, "n_nationkey, n_name, n_regionkey, n_comment") {
			t.Errorf("nation pulled as %s, want all its columns", tb.Create)
		}
	}
}
