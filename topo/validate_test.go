package topo_test

import (
	"strings"
	"testing"

	"github.com/tesseradb/tessera/topo"
)

// minimal is a valid topology that the cases below break in one place.
const minimal = `{
 "authoritative_shard_group": "main",
 "shard_indexes": {"h": {"type": "xxhash", "columns": ["id"]}},
 "shard_groups": [
  {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
  {"uid": "g", "default_shard_index": "h", "key_ranges": [
    {"shard_uid": "a", "end": "40"}, {"shard_uid": "b", "start": "40", "end": "80"}, {"shard_uid": "c", "start": "80"}]}
 ],
 "databases": {"db": {"schemas": {"public": {"tables": {"t": {"shard_group": "g"}}}}}}
}`

func TestValidationProblems(t *testing.T) {
	cases := []struct {
		name, from, to string
		want           []string // every one must be reported
	}{
		{"overlap", `{"shard_uid": "b", "start": "40", "end": "80"}`, `{"shard_uid": "b", "start": "30", "end": "80"}`,
			[]string{"shard_groups[1].key_ranges[1]: overlaps [,40)"}},
		{"gap", `{"shard_uid": "b", "start": "40", "end": "80"}`, `{"shard_uid": "b", "start": "40", "end": "70"}`,
			[]string{"shard_groups[1].key_ranges: keys [70,80) belong to no shard"}},
		{"open top missing", `{"shard_uid": "c", "start": "80"}`, `{"shard_uid": "c", "start": "80", "end": "f0"}`,
			[]string{"shard_groups[1].key_ranges: keys [f0,) belong to no shard"}},
		{"two open tops", `{"shard_uid": "b", "start": "40", "end": "80"}`, `{"shard_uid": "b", "start": "40"}`,
			[]string{"shard_groups[1].key_ranges[2]: overlaps [40,)"}},
		{"bad hex", `"end": "40"`, `"end": "4g"`, []string{`shard_groups[1].key_ranges[0].end: "4g" is not a hexadecimal prefix`}},
		{"too long", `"end": "40"`, `"end": "40000000000000000"`, []string{"shard_groups[1].key_ranges[0].end: \"40000000000000000\" has 17 hex digits"}},
		{"empty range", `"start": "40", "end": "80"`, `"start": "80", "end": "80"`, []string{"shard_groups[1].key_ranges[1]: empty range"}},
		{"unknown key", `"uid": "g",`, `"uid": "g", "colour": "red",`, []string{"shard_groups[1].colour: unknown key"}},
		{"unknown top key", `"authoritative_shard_group": "main",`, `"authoritative_shard_group": "main", "extra": 1,`, []string{"extra: unknown key"}},
		{"unknown index type", `"type": "xxhash"`, `"type": "md5"`, []string{`shard_indexes.h.type: unknown shard index type "md5"`}},
		{"two columns", `"columns": ["id"]`, `"columns": ["id", "region"]`, []string{"shard_indexes.h.columns: names 2 columns"}},
		{"expression", `"columns": ["id"]`, `"columns": ["lower(email)"]`, []string{`shard_indexes.h.columns[0]: "lower(email)" is not a column name; expressions are not supported`}},
		{"no columns", `"columns": ["id"]`, `"columns": []`, []string{"shard_indexes.h.columns: must name exactly one column"}},
		{"modulo without modulus", `"type": "xxhash"`, `"type": "modulo"`, []string{"shard_indexes.h.index_params.modulus: required for a modulo index"}},
		{"modulus zero", `"type": "xxhash", "columns": ["id"]`, `"type": "modulo", "columns": ["id"], "index_params": {"modulus": 0}`, []string{"shard_indexes.h.index_params.modulus: must be a positive integer"}},
		{"modulus on xxhash", `"columns": ["id"]}`, `"columns": ["id"], "index_params": {"modulus": 3}}`, []string{"shard_indexes.h.index_params.modulus: only a modulo index takes a modulus"}},
		{"missing authoritative", `"authoritative_shard_group": "main",`, ``, []string{"authoritative_shard_group: required"}},
		{"authoritative sharded", `"authoritative_shard_group": "main"`, `"authoritative_shard_group": "g"`, []string{`authoritative_shard_group: shard group "g" must have exactly one key range`}},
		{"default not authoritative", `"authoritative_shard_group": "main",`, `"authoritative_shard_group": "main", "default_shard_group": "g",`, []string{"default_shard_group: must be omitted or equal to authoritative_shard_group"}},
		{"duplicate group", `{"uid": "g",`, `{"uid": "main",`, []string{`shard_groups[1].uid: duplicate shard group "main"`}},
		{"unknown table group", `"shard_group": "g"`, `"shard_group": "nope"`, []string{`databases.db.schemas.public.tables.t.shard_group: no shard group named "nope"`}},
		{"unknown table index", `"shard_group": "g"`, `"shard_group": "g", "shard_index": "nope"`, []string{`databases.db.schemas.public.tables.t.shard_index: no shard index named "nope"`}},
		{"group without index", `"uid": "g", "default_shard_index": "h",`, `"uid": "g",`, []string{`databases.db.schemas.public.tables.t: shard group "g" has 3 key ranges but neither it nor the table names a shard index`}},
		{"unknown alternate", `"shard_group": "g"`, `"shard_group": "g", "alternate_shard_indexes": ["x"]`, []string{`alternate_shard_indexes[0]: no shard index named "x"`}},
		{"alternate repeats index", `"shard_group": "g"`, `"shard_group": "g", "alternate_shard_indexes": ["h"]`, []string{`alternate_shard_indexes[0]: shard index "h" is already the table's index`}},
		{"reference unknown group", `"tables": {"t": {"shard_group": "g"}}`, `"tables": {"t": {"shard_group": "g"}}, "reference_tables": {"r": {"shard_groups": ["g", "zz"]}}`, []string{`reference_tables.r.shard_groups[1]: no shard group named "zz"`}},
		{"reference also a table", `"tables": {"t": {"shard_group": "g"}}`, `"tables": {"t": {"shard_group": "g"}}, "reference_tables": {"t": {"shard_groups": ["g"]}}`, []string{`reference_tables.t: table "t" is also listed under tables`}},
		{"wrong type", `"uid": "g",`, `"uid": 7,`, []string{"shard_groups[1].uid: must be a string, not a number"}},
		{"not json", minimal, `{"a":`, []string{"not valid JSON"}},
		{"schema default multi-range without index", `"public": {"tables"`, `"public": {"default_shard_group": "g2", "tables"`,
			[]string{`databases.db.schemas.public.default_shard_group: no shard group named "g2"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := strings.Replace(minimal, c.from, c.to, 1)
			if doc == minimal {
				t.Fatalf("replacement %q did not apply", c.from)
			}
			_, err := topo.Parse([]byte(doc))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not report %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestEveryProblemIsReported(t *testing.T) {
	doc := strings.NewReplacer(
		`"uid": "g",`, `"uid": "g", "colour": 1,`,
		`"type": "xxhash"`, `"type": "sha1"`,
		`"start": "40", "end": "80"`, `"start": "30", "end": "80"`,
	).Replace(minimal)
	_, err := topo.Parse([]byte(doc))
	var verr *topo.ValidationError
	if !asValidation(err, &verr) {
		t.Fatalf("want a ValidationError, got %v", err)
	}
	if len(verr.Problems) < 3 {
		t.Fatalf("want at least 3 problems, got %d:\n%v", len(verr.Problems), err)
	}
}

func asValidation(err error, target **topo.ValidationError) bool {
	v, ok := err.(*topo.ValidationError)
	*target = v
	return ok
}

func TestResolutionOrder(t *testing.T) {
	doc := `{
	 "authoritative_shard_group": "main",
	 "shard_indexes": {"h": {"type": "xxhash", "columns": ["id"]}, "m": {"type": "modulo", "columns": ["tenant"], "index_params": {"modulus": 2}}},
	 "shard_groups": [
	  {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
	  {"uid": "dbg", "key_ranges": [{"shard_uid": "s1"}]},
	  {"uid": "sg", "default_shard_index": "h", "key_ranges": [{"shard_uid": "s1", "end": "80"}, {"shard_uid": "s2", "start": "80"}]}
	 ],
	 "databases": {"app": {"default_shard_group": "dbg", "schemas": {
	   "sharded": {"default_shard_group": "sg", "tables": {"by_tenant": {"shard_index": "m"}, "pinned": {"shard_group": "main"}},
	               "reference_tables": {"countries": {"shard_groups": ["sg", "main"]}}},
	   "plain": {}
	 }}}
	}`
	top, err := topo.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ db, schema, table, want string }{
		{"other", "public", "x", "main{[,)=shard-0}"},
		{"app", "unlisted", "x", "dbg{[,)=s1}"},
		{"app", "plain", "x", "dbg{[,)=s1}"},
		{"app", "sharded", "x", "sg{[,80)=s1 [80,)=s2} by h(xxhash(id))"},
		{"app", "sharded", "by_tenant", "sg{[,80)=s1 [80,)=s2} by m(modulo(tenant) mod 2)"},
		{"app", "sharded", "pinned", "main{[,)=shard-0}"},
		{"app", "sharded", "countries", "reference on sg{[,80)=s1 [80,)=s2} main{[,)=shard-0}"},
	} {
		if got := top.Resolve(c.db, c.schema, c.table).Describe(); got != c.want {
			t.Errorf("%s.%s.%s: %s, want %s", c.db, c.schema, c.table, got, c.want)
		}
	}
	if top.AuthoritativeShard() != "shard-0" {
		t.Errorf("authoritative shard %q", top.AuthoritativeShard())
	}
	if got := strings.Join(top.Shards(), ","); got != "s1,s2,shard-0" {
		t.Errorf("shards %s", got)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	for _, name := range []string{"store_xxhash.json", "store_modulo.json", "store_range.json", "extenddb.json", "default.json"} {
		top := load(t, name)
		doc, err := top.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		again, err := topo.Parse(doc)
		if err != nil {
			t.Fatalf("%s: re-parse of marshalled form: %v\n%s", name, err, doc)
		}
		if changes := topo.Diff(top, again); len(changes) != 0 {
			t.Errorf("%s: round trip changed placements: %v", name, changes)
		}
		doc2, _ := again.MarshalJSON()
		if string(doc) != string(doc2) {
			t.Errorf("%s: marshalled form is not stable", name)
		}
	}
}
