package replicator

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/topo/shardfunc"
)

// routeGolden is one expected outcome of `tessera topo route`.
type routeGolden struct {
	File       string `json:"file"`
	Table      string `json:"table"`
	IndexFlag  string `json:"index_flag"`
	Type       string `json:"type"`
	Value      string `json:"value"`  // text format (routes.json)
	Binary     string `json:"binary"` // hex binary format (binary_routes.json)
	RoutingKey string `json:"routing_key"`
	Shard      string `json:"shard"`
	SQLState   string `json:"sqlstate"`
}

func readGolden(t *testing.T, path string) []routeGolden {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cases []routeGolden
	if err := json.Unmarshal(doc, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 5 {
		t.Fatalf("%s holds only %d cases", path, len(cases))
	}
	return cases
}

// checkCopyRoute routes a one-row COPY stream whose second field is the
// key and checks that the row lands where `tessera topo route` says.
func checkCopyRoute(t *testing.T, c routeGolden, raw []byte) {
	t.Helper()
	typ, err := shardfunc.ParseColumnType(c.Type)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(c.Table, ".")
	p := loadTopology(t, c.File).Resolve(parts[0], parts[1], parts[2])
	shards := p.Group.Shards()
	r, err := NewCopyRouter(p, 1, typ, shards)
	if err != nil {
		t.Fatal(err)
	}
	in := copyStream([][][]byte{{[]byte("payload"), raw}})
	outs := make([]bytes.Buffer, len(shards))
	dst := make([]io.Writer, len(shards))
	for i := range outs {
		dst[i] = &outs[i]
	}
	if err := r.Route(bytes.NewReader(in), dst); err != nil {
		t.Fatal(err)
	}
	for i, s := range shards {
		n := len(splitTuples(t, outs[i].Bytes()))
		if want := map[bool]int{true: 1, false: 0}[s == c.Shard]; n != want {
			t.Errorf("shard %s got %d rows, want %d (topo route says %s)", s, n, want, c.Shard)
		}
	}
	key, _, err := r.KeyOf(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%016x", key); got != c.RoutingKey {
		t.Errorf("routing key %s, topo route says %s", got, c.RoutingKey)
	}
}

// TestCopyRoutesAgreeWithTopoRouteBinary checks binary key values of every
// supported type against outcomes recorded from the CLI:
//
//	tessera topo route --file testdata/topologies/FILE --table TABLE --type TYPE --binary HEX
func TestCopyRoutesAgreeWithTopoRouteBinary(t *testing.T) {
	for _, c := range readGolden(t, "testdata/binary_routes.json") {
		t.Run(c.File+"/"+c.Type+"/"+c.Binary, func(t *testing.T) {
			raw, err := hex.DecodeString(c.Binary)
			if err != nil {
				t.Fatal(err)
			}
			checkCopyRoute(t, c, raw)
		})
	}
}

// TestCopyRoutesAgreeWithSeedRoutes routes, in binary COPY form, the text
// values of testdata/topologies/routes.json, which the CLI's own tests
// check `tessera topo route` against.
func TestCopyRoutesAgreeWithSeedRoutes(t *testing.T) {
	n := 0
	for _, c := range readGolden(t, filepath.Join(topologies, "routes.json")) {
		if c.SQLState != "" || c.IndexFlag != "" || c.Shard == "shard-0" {
			continue // errors, alternates and unsharded tables are not copy routing
		}
		var raw []byte
		switch c.Type {
		case "bigint", "int8":
			v, err := strconv.ParseInt(c.Value, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			raw = binary.BigEndian.AppendUint64(nil, uint64(v))
		case "integer", "int4":
			v, err := strconv.ParseInt(c.Value, 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			raw = binary.BigEndian.AppendUint32(nil, uint32(v))
		case "text", "varchar":
			raw = []byte(c.Value)
		default:
			t.Fatalf("routes.json has a %s case; teach this test its binary form", c.Type)
		}
		n++
		t.Run(c.Table+"/"+c.Value, func(t *testing.T) { checkCopyRoute(t, c, raw) })
	}
	if n < 5 {
		t.Fatalf("only %d routes.json cases apply", n)
	}
}
