package planner

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// loadTopology parses testdata/topologies/NAME.
func loadTopology(t testing.TB, name string) *topo.Topology {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "testdata", "topologies", name))
	if err != nil {
		t.Fatal(err)
	}
	return parseTopology(t, string(doc))
}

func parseTopology(t testing.TB, doc string) *topo.Topology {
	t.Helper()
	top, err := topo.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// referenceTopology is store_xxhash with an app schema and reference
// tables: countries on the customer shards only, currencies everywhere.
const referenceTopology = `{
  "authoritative_shard_group": "main",
  "shard_indexes": {"customer_id_xxhash": {"type": "xxhash", "columns": ["customer_id"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "customer_data", "default_shard_index": "customer_id_xxhash",
     "key_ranges": [{"shard_uid": "customer-shard-1", "end": "80"}, {"shard_uid": "customer-shard-2", "start": "80"}]}
  ],
  "databases": {"store": {"schemas": {
    "public": {"tables": {"customers": {"shard_group": "customer_data"}},
               "reference_tables": {"countries": {"shard_groups": ["customer_data"]},
                                    "currencies": {"shard_groups": ["main", "customer_data"]}}},
    "app": {"tables": {"accounts": {"shard_group": "customer_data"}}}
  }}}
}`

// fakeSchema is a catalog stand-in: "db.schema.table.column" -> type.
type fakeSchema map[string]shardfunc.ColumnType

func (s fakeSchema) ColumnType(db, schema, table, column string) (shardfunc.ColumnType, error) {
	if t, ok := s[db+"."+schema+"."+table+"."+column]; ok {
		return t, nil
	}
	return 0, &pgerr.Error{Code: "42703", Message: "column " + column + " of " + table + " does not exist"}
}

// ColumnNames knows the tables the tests insert into without a column
// list.
func (s fakeSchema) ColumnNames(db, schema, table string) ([]string, error) {
	if cols, ok := testColumns[db+"."+schema+"."+table]; ok {
		return cols, nil
	}
	return nil, &pgerr.Error{Code: "42P01", Message: "relation " + table + " does not exist"}
}

// Routines is a catalog snapshot with a few of pg_catalog's aggregates
// and the users' own: store.public.my_sum, store.app.total and an
// aggregate app.count that shadows count on a path naming app.
func (s fakeSchema) Routines(db string) (*Routines, error) {
	if db != "store" {
		return NewRoutines(nil), nil
	}
	return testRoutines, nil
}

// Views: store.public.all_customers reads customers (sharded), through
// store.public.v_customers; store.public.eur reads currencies
// (a reference table on main); app.acct_view reads app.accounts.
func (s fakeSchema) Views(db string) (*Views, error) {
	if db != "store" {
		return NewViews(nil, nil), nil
	}
	return testViews, nil
}

// UniqueIndexes: customers has its primary key (customer_id); orders
// its primary key (customer_id, id) and a unique number.
func (s fakeSchema) UniqueIndexes(db, schema, table string) ([]UniqueIndex, error) {
	switch db + "." + schema + "." + table {
	case "store.public.customers":
		return []UniqueIndex{{Name: "customers_pkey", Constraint: "customers_pkey", Columns: []string{"customer_id"}}}, nil
	case "store.public.orders":
		return []UniqueIndex{
			{Name: "orders_pkey", Constraint: "orders_pkey", Columns: []string{"customer_id", "id"}},
			{Name: "orders_number_key", Constraint: "orders_number_key", Columns: []string{"number"}},
		}, nil
	}
	return nil, nil
}

// Functions: n_customers counts customers (sharded), via_other
// through n_customers, plp_count in PL/pgSQL; n_currencies reads a
// reference table. Triggers: audited's audit writes audit_log
// (unsharded); accounts' touch reads countries (a reference table there)
// and log_account updates accounts; items' log_account updates accounts
// on other shards.
func (s fakeSchema) Functions(db string) (*Functions, error) {
	if db != "store" {
		return NewFunctions(nil, nil), nil
	}
	return testFunctions, nil
}

var testFunctions = NewFunctions([]FunctionBody{
	{Schema: "public", Name: "audit", SQL: plpgsql(`CREATE FUNCTION public.audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit_log VALUES (NEW.customer_id);
  RETURN NEW;
END $$`)},
	{Schema: "public", Name: "touch", SQL: plpgsql(`CREATE FUNCTION public.touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.name := lower(NEW.name) || (SELECT code FROM countries LIMIT 1);
  RETURN NEW;
END $$`)},
	{Schema: "public", Name: "n_customers", SQL: []string{"SELECT count(*) FROM customers"}},
	{Schema: "public", Name: "via_other", SQL: []string{"SELECT n_customers() + 1"}},
	{Schema: "public", Name: "n_currencies", SQL: []string{"SELECT count(*) FROM public.currencies"}},
	{Schema: "public", Name: "n_local", SQL: []string{"WITH customers AS (SELECT 1) SELECT count(*) FROM customers"}},
	{Schema: "public", Name: "log_account", SQL: []string{"UPDATE app.accounts SET n = n + 1 WHERE customer_id = $1"}},
	{Schema: "public", Name: "plp_dynamic", SQL: []string{"SELECT 1"}, Opaque: true},
	{Schema: "public", Name: "plp_count", SQL: plpgsql(`CREATE FUNCTION public.plp_count() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
  SELECT count(*) INTO n FROM customers;
  RETURN n;
END $$`)},
}, []Trigger{
	{TableSchema: "public", Table: "audited", FuncSchema: "public", Func: "audit"},
	{TableSchema: "app", Table: "accounts", FuncSchema: "public", Func: "touch"},
	{TableSchema: "app", Table: "accounts", FuncSchema: "public", Func: "log_account"},
	{TableSchema: "public", Table: "items", FuncSchema: "public", Func: "log_account"},
})

var testViews = NewViews([][4]string{
	{"public", "v_customers", "public", "customers"},
	{"public", "all_customers", "public", "v_customers"},
	{"public", "eur", "public", "currencies"},
	{"app", "acct_view", "app", "accounts"},
}, [][4]string{
	{"public", "ruled", "public", "rule_log"},      // DO ALSO INSERT INTO rule_log (unsharded)
	{"app", "accounts", "public", "currencies"},    // a reference table held there
	{"public", "customers_ruled", "public", "eur"}, // a view over currencies
})

var testRoutines = NewRoutines([][2]string{
	{"pg_catalog", "count"}, {"pg_catalog", "sum"}, {"pg_catalog", "max"}, {"pg_catalog", "percentile_cont"},
	{"pg_catalog", "row_number"}, {"pg_catalog", "regr_fancy"},
	{"public", "my_sum"}, {"app", "total"}, {"app", "count"},
})

var testColumns = map[string][]string{
	"store.public.customers": {"customer_id", "name"},
}

var testSchema = fakeSchema{
	"store.public.customers.customer_id":      shardfunc.Int8,
	"store.public.audited.customer_id":        shardfunc.Int8,
	"store.public.customers.age":              shardfunc.Int4, // not a key: ORDER BY merges ask for it
	"store.public.customers.name":             shardfunc.Text,
	"store.public.customers.vip":              shardfunc.Bool,
	"store.public.customers.balance":          shardfunc.Numeric,
	"store.public.visits.day":                 shardfunc.Date,
	"store.public.orders.customer_id":         shardfunc.Int4,
	"store.app.accounts.customer_id":          shardfunc.Int8,
	"extenddb.public.items.pk":                shardfunc.Text,
	"extenddb.public.stream_records.base_pk":  shardfunc.Text,
	"extenddb.public.stream_records.shard_id": shardfunc.Varchar,
}

// params returns Params for the given values: strings in text format,
// int64 and int32 in binary, nil for NULL.
func params(values ...any) Params {
	type param struct {
		format shardfunc.Format
		value  []byte
	}
	ps := make([]param, len(values))
	for i, v := range values {
		switch v := v.(type) {
		case string:
			ps[i] = param{shardfunc.TextFormat, []byte(v)}
		case int64:
			ps[i] = param{shardfunc.BinaryFormat, binary.BigEndian.AppendUint64(nil, uint64(v))}
		case int32:
			ps[i] = param{shardfunc.BinaryFormat, binary.BigEndian.AppendUint32(nil, uint32(v))}
		}
	}
	return func(n int) (shardfunc.Format, []byte, bool) {
		if n < 1 || n > len(ps) {
			return 0, nil, false
		}
		return ps[n-1].format, ps[n-1].value, true
	}
}

// summary renders a statement and its execution-time route in one line:
// "kind route shard,shard" or "kind error CODE".
func summary(st *Statement, p Params) string {
	shards, err := st.Shards(p)
	if err != nil {
		return st.Kind.String() + " error " + pgerr.Code(err)
	}
	return strings.TrimSpace(st.Kind.String() + " " + st.Route.String() + " " + strings.Join(shards, ","))
}

func planOne(t testing.TB, p *Planner, top *topo.Topology, in Input) *Statement {
	t.Helper()
	stmts, err := p.Plan(top, 1, testSchema, in)
	if err != nil {
		t.Fatalf("%q: %v", in.SQL, err)
	}
	if len(stmts) != 1 {
		t.Fatalf("%q: %d statements", in.SQL, len(stmts))
	}
	return stmts[0]
}

func store(sql string) Input {
	// The refusals these tests check are what gathering replaces
	// (gather_test.go tests it).
	return Input{SQL: sql, Database: "store", SearchPath: []string{"public"}, NoGather: true}
}

func errCode(err error) string {
	if err == nil {
		return ""
	}
	var pe *pgerr.Error
	if !errors.As(err, &pe) {
		return "no pgerr"
	}
	return pe.Code
}

// storeTopology is the text of store_xxhash.json.
func storeTopology(t testing.TB) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "testdata", "topologies", "store_xxhash.json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

// plpgsql is the statements of a PL/pgSQL function's body.
func plpgsql(def string) []string {
	stmts, _ := PLpgSQLStatements(def)
	return stmts
}
