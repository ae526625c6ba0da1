package topo

import (
	"bytes"
	"encoding/json"
	"regexp"

	"github.com/tesseradb/tessera/topo/shardfunc"
)

// MaxDocumentSize bounds a topology document; a larger one is refused
// before it is decoded.
const MaxDocumentSize = 16 << 20

// Parse decodes and validates a data topology document. On failure the
// error is a *ValidationError listing every problem found.
func Parse(doc []byte) (*Topology, error) {
	var ps problems
	if len(doc) > MaxDocumentSize {
		ps.add("", "document is %d bytes, more than the %d allowed", len(doc), MaxDocumentSize)
		return nil, ps.err()
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		ps.add("", "not valid JSON: %v", err)
		return nil, ps.err()
	}
	if dec.More() {
		ps.add("", "not valid JSON: more than one value")
		return nil, ps.err()
	}
	d := decoder{ps: &ps}
	t := d.topology(tree)
	validate(t, &ps)
	if len(ps.list) == 0 {
		t.replica = replicaView(t, &ps)
	}
	if len(ps.list) > 0 {
		return nil, ps.err()
	}
	return t, nil
}

// decoder builds a Topology from the generic JSON tree, refusing unknown
// keys and wrong types and carrying on after each problem so that every one
// is reported.
type decoder struct{ ps *problems }

func (d decoder) object(path string, v any, allowed ...string) map[string]any {
	m, ok := v.(map[string]any)
	if !ok {
		d.ps.add(path, "must be an object, not %s", kindOf(v))
		return nil
	}
	if allowed != nil {
		for _, k := range sortedKeys(m) {
			known := false
			for _, a := range allowed {
				known = known || a == k
			}
			if !known {
				d.ps.add(join(path, k), "unknown key")
			}
		}
	}
	return m
}

func (d decoder) str(path string, v any) string {
	if v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		d.ps.add(path, "must be a string, not %s", kindOf(v))
	}
	return s
}

func (d decoder) array(path string, v any) []any {
	if v == nil {
		return nil
	}
	a, ok := v.([]any)
	if !ok {
		d.ps.add(path, "must be an array, not %s", kindOf(v))
	}
	return a
}

func (d decoder) strings(path string, v any) []string {
	var out []string
	for i, e := range d.array(path, v) {
		out = append(out, d.str(index(path, i), e))
	}
	return out
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "unknown"
}

func (d decoder) topology(v any) *Topology {
	m := d.object("", v, "authoritative_shard_group", "default_shard_group", "shard_indexes", "shard_groups", "databases")
	t := &Topology{
		ShardIndexes: map[string]*ShardIndex{},
		Databases:    map[string]*Database{},
	}
	if m == nil {
		return t
	}
	t.AuthoritativeShardGroup = d.str("authoritative_shard_group", m["authoritative_shard_group"])
	t.DefaultShardGroup = d.str("default_shard_group", m["default_shard_group"])
	if m["shard_indexes"] != nil {
		idx := d.object("shard_indexes", m["shard_indexes"])
		for _, name := range sortedKeys(idx) {
			t.ShardIndexes[name] = d.shardIndex(join("shard_indexes", name), name, idx[name])
		}
	}
	for i, g := range d.array("shard_groups", m["shard_groups"]) {
		t.ShardGroups = append(t.ShardGroups, d.shardGroup(index("shard_groups", i), g))
	}
	if m["databases"] != nil {
		dbs := d.object("databases", m["databases"])
		for _, name := range sortedKeys(dbs) {
			t.Databases[name] = d.database(join("databases", name), dbs[name])
		}
	}
	return t
}

// plainColumn is an unquoted or case-preserved column name; anything else
// (an expression, a list) is not a single column.
var plainColumn = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)

func (d decoder) shardIndex(path, name string, v any) *ShardIndex {
	ix := &ShardIndex{Name: name}
	m := d.object(path, v, "type", "columns", "index_params")
	if m == nil {
		return ix
	}
	typ := d.str(join(path, "type"), m["type"])
	kind, ok := shardfunc.ParseKind(typ)
	switch {
	case m["type"] == nil:
		d.ps.add(join(path, "type"), "required (xxhash, modulo or range)")
	case !ok:
		d.ps.add(join(path, "type"), "unknown shard index type %q (want xxhash, modulo or range)", typ)
	}
	ix.Func.Kind = kind
	ix.Columns = d.strings(join(path, "columns"), m["columns"])
	switch {
	case len(ix.Columns) == 0:
		d.ps.add(join(path, "columns"), "must name exactly one column")
	case len(ix.Columns) > 1:
		d.ps.add(join(path, "columns"), "names %d columns; only single-column shard keys are supported", len(ix.Columns))
	case !plainColumn.MatchString(ix.Columns[0]):
		d.ps.add(index(join(path, "columns"), 0), "%q is not a column name; expressions are not supported as shard keys", ix.Columns[0])
	}
	var params map[string]any
	if m["index_params"] != nil {
		params = d.object(join(path, "index_params"), m["index_params"], "modulus")
	}
	if kind == shardfunc.Modulo {
		ppath := join(join(path, "index_params"), "modulus")
		n, ok := params["modulus"].(json.Number)
		if params["modulus"] == nil {
			d.ps.add(ppath, "required for a modulo index")
		} else if mod, err := n.Int64(); !ok || err != nil || mod <= 0 {
			d.ps.add(ppath, "must be a positive integer, not %v", params["modulus"])
		} else {
			ix.Func.Modulus = uint64(mod)
		}
	} else if params["modulus"] != nil {
		d.ps.add(join(join(path, "index_params"), "modulus"), "only a modulo index takes a modulus")
	}
	return ix
}

func (d decoder) shardGroup(path string, v any) *ShardGroup {
	g := &ShardGroup{}
	m := d.object(path, v, "uid", "default_shard_index", "key_ranges", "replica_key_ranges")
	if m == nil {
		return g
	}
	g.UID = d.str(join(path, "uid"), m["uid"])
	g.DefaultShardIndex = d.str(join(path, "default_shard_index"), m["default_shard_index"])
	g.KeyRanges = d.keyRanges(join(path, "key_ranges"), m["key_ranges"])
	g.ReplicaKeyRanges = d.keyRanges(join(path, "replica_key_ranges"), m["replica_key_ranges"])
	return g
}

func (d decoder) keyRanges(rpath string, v any) []KeyRange {
	var out []KeyRange
	for i, r := range d.array(rpath, v) {
		p := index(rpath, i)
		rm := d.object(p, r, "shard_uid", "start", "end")
		kr := KeyRange{}
		if rm != nil {
			kr.ShardUID = d.str(join(p, "shard_uid"), rm["shard_uid"])
			kr.Start = d.str(join(p, "start"), rm["start"])
			kr.End = d.str(join(p, "end"), rm["end"])
		}
		out = append(out, kr)
	}
	return out
}

func (d decoder) database(path string, v any) *Database {
	db := &Database{Schemas: map[string]*Schema{}}
	m := d.object(path, v, "default_shard_group", "schemas")
	if m == nil {
		return db
	}
	db.DefaultShardGroup = d.str(join(path, "default_shard_group"), m["default_shard_group"])
	if m["schemas"] != nil {
		spath := join(path, "schemas")
		schemas := d.object(spath, m["schemas"])
		for _, name := range sortedKeys(schemas) {
			db.Schemas[name] = d.schema(join(spath, name), schemas[name])
		}
	}
	return db
}

func (d decoder) schema(path string, v any) *Schema {
	s := &Schema{Tables: map[string]*Table{}, ReferenceTables: map[string]*ReferenceTable{}}
	m := d.object(path, v, "default_shard_group", "tables", "reference_tables")
	if m == nil {
		return s
	}
	s.DefaultShardGroup = d.str(join(path, "default_shard_group"), m["default_shard_group"])
	if m["tables"] != nil {
		tpath := join(path, "tables")
		tables := d.object(tpath, m["tables"])
		for _, name := range sortedKeys(tables) {
			p := join(tpath, name)
			t := d.table(p, tables[name], "shard_group", "shard_index", "alternate_shard_indexes", "replica_reads")
			if t.replicaDoc != nil {
				// One level only: the binding replica reads use.
				t.ReplicaReads = d.table(join(p, "replica_reads"), t.replicaDoc, "shard_group", "shard_index", "alternate_shard_indexes")
			}
			s.Tables[name] = t
		}
	}
	if m["reference_tables"] != nil {
		rpath := join(path, "reference_tables")
		refs := d.object(rpath, m["reference_tables"])
		for _, name := range sortedKeys(refs) {
			p := join(rpath, name)
			rm := d.object(p, refs[name], "shard_groups")
			r := &ReferenceTable{}
			if rm != nil {
				r.ShardGroups = d.strings(join(p, "shard_groups"), rm["shard_groups"])
			}
			s.ReferenceTables[name] = r
		}
	}
	return s
}

func (d decoder) table(p string, v any, allowed ...string) *Table {
	tm := d.object(p, v, allowed...)
	t := &Table{}
	if tm != nil {
		t.ShardGroup = d.str(join(p, "shard_group"), tm["shard_group"])
		t.ShardIndex = d.str(join(p, "shard_index"), tm["shard_index"])
		t.AlternateShardIndexes = d.strings(join(p, "alternate_shard_indexes"), tm["alternate_shard_indexes"])
		t.replicaDoc = tm["replica_reads"]
	}
	return t
}
