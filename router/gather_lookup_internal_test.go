package router

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/router/planner"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// copyRow is a binary COPY row of fields (nil for NULL).
func copyRow(fields ...[]byte) []byte {
	row := binary.BigEndian.AppendUint16(nil, uint16(len(fields)))
	for _, f := range fields {
		if f == nil {
			row = binary.BigEndian.AppendUint32(row, 0xffffffff)
			continue
		}
		row = binary.BigEndian.AppendUint32(row, uint32(len(f)))
		row = append(row, f...)
	}
	return row
}

func int4(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

func TestCopyField(t *testing.T) {
	row := copyRow([]byte("a"), nil, int4(7))
	if raw, null, ok := copyField(row, 2); !ok || null || binary.BigEndian.Uint32(raw) != 7 {
		t.Errorf("field 2: %x %v %v", raw, null, ok)
	}
	if _, null, ok := copyField(row, 1); !ok || !null {
		t.Errorf("field 1: null %v ok %v", null, ok)
	}
	for _, bad := range [][]byte{nil, {0}, row[:len(row)-1], copyRow([]byte("a"))} {
		if _, _, ok := copyField(bad, 2); ok {
			t.Errorf("malformed row %x read", bad)
		}
	}
}

// A lookup's values go to the shards that own them, each as an element
// of its shard's array; values no row can hold (outside the key's type,
// negative under a modulo index) and NULLs go nowhere; past the bound
// the table is pulled whole.
func TestLookupKeysRouteValues(t *testing.T) {
	doc, err := os.ReadFile("../testdata/topologies/store_xxhash.json")
	if err != nil {
		t.Fatal(err)
	}
	top, err := topo.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	group, _ := top.Group("customer_data")
	mod := &topo.ShardIndex{Func: shardfunc.Func{Kind: shardfunc.Modulo, Modulus: 4}, Columns: []string{"customer_id"}}
	xx := &topo.ShardIndex{Func: shardfunc.Func{Kind: shardfunc.XXHash}, Columns: []string{"customer_id"}}
	lk := &planner.GatherLookup{FromColumn: 1, FromType: shardfunc.Int4, KeyType: shardfunc.Int2, Index: mod, Group: group,
		Pull: "SELECT k FROM t WHERE note = '$1' AND k = ANY($1::smallint[])"}
	k := newLookupKeys(lk)
	for _, v := range []int32{5, 5, -3, 40000, 6} {
		k.add(copyRow([]byte("x"), int4(v)))
	}
	k.add(copyRow([]byte("x"), nil))
	pulls := k.pulls(group.Shards())
	var all []string
	for _, s := range group.Shards() {
		if p, ok := pulls[s]; ok {
			if !strings.HasPrefix(p, "SELECT k FROM t WHERE note = '$1' AND k = ANY('{") {
				t.Errorf("shard %s: %s", s, p)
			}
			all = append(all, p)
		}
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{"5", "6"} {
		key, _ := mod.Func.KeyInt(int64(want[0] - '0'))
		if !strings.Contains(pulls[group.ShardFor(key)], want) {
			t.Errorf("value %s not pulled from its shard %s: %s", want, group.ShardFor(key), joined)
		}
	}
	if strings.Contains(joined, "-3") || strings.Contains(joined, "40000") || strings.Count(joined, "5") != 1 {
		t.Errorf("values no row holds, or twice: %s", joined)
	}

	text := &planner.GatherLookup{FromType: shardfunc.Text, KeyType: shardfunc.Text, Index: xx, Group: group, Pull: "SELECT 1 WHERE k = ANY($1::text[])"}
	k = newLookupKeys(text)
	k.add(copyRow([]byte(`a"b\c`)))
	key, _ := xx.Func.Key(shardfunc.Text, shardfunc.BinaryFormat, []byte(`a"b\c`))
	if got := k.pulls(group.Shards())[group.ShardFor(key)]; got != `SELECT 1 WHERE k = ANY(E'{"a\\"b\\\\c"}'::text[])` {
		t.Errorf("text value: %s", got)
	}

	k = newLookupKeys(text)
	for i := 0; i <= planner.MaxLookupKeys; i++ {
		k.add(copyRow([]byte(strings.Repeat("v", 1+i%50) + string(rune('a'+i%26)) + string(rune(i)))))
	}
	if !k.over {
		t.Errorf("%d values kept", len(k.seen))
	}
	k = newLookupKeys(text)
	k.add([]byte{0, 1, 0})
	if !k.over {
		t.Error("a malformed row did not end the lookup")
	}
}
