package topo_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

const topologies = "../testdata/topologies"

func load(t testing.TB, name string) *topo.Topology {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(topologies, name))
	if err != nil {
		t.Fatal(err)
	}
	top, err := topo.Parse(doc)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return top
}

// routeCase is one line of testdata/topologies/routes.json, the outcomes
// the seeds state, shared with the CLI's tests.
type routeCase struct {
	Note       string `json:"note"`
	File       string `json:"file"`
	Table      string `json:"table"`
	IndexFlag  string `json:"index_flag"`
	Type       string `json:"type"`
	Value      string `json:"value"`
	RoutingKey string `json:"routing_key"`
	Shard      string `json:"shard"`
	ShardGroup string `json:"shard_group"`
	Index      string `json:"index"`
	SQLState   string `json:"sqlstate"`
}

func TestTestdataTopologiesAreValid(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(topologies, "*.json"))
	if len(files) < 5 {
		t.Fatalf("found only %d topologies", len(files))
	}
	for _, f := range files {
		if filepath.Base(f) == "routes.json" {
			continue
		}
		load(t, filepath.Base(f))
	}
}

func TestSeedRoutes(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(topologies, "routes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []routeCase
	if err := json.Unmarshal(doc, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Note, func(t *testing.T) {
			top := load(t, c.File)
			parts := strings.Split(c.Table, ".")
			p := top.Resolve(parts[0], parts[1], parts[2])
			ix := p.Index
			if c.IndexFlag != "" {
				ix = top.ShardIndexes[c.IndexFlag]
			}
			typ, err := shardfunc.ParseColumnType(c.Type)
			var key uint64
			var shard string
			if err == nil {
				key, shard, err = p.RouteBy(ix, typ, shardfunc.TextFormat, []byte(c.Value))
			}
			if c.SQLState != "" {
				if pgerr.Code(err) != c.SQLState {
					t.Fatalf("got %v (SQLSTATE %s), want SQLSTATE %s", err, pgerr.Code(err), c.SQLState)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			name := ""
			if ix != nil {
				name = ix.Name
			}
			got := fmt.Sprintf("%016x %s %s %s", key, shard, p.Group.UID, name)
			want := fmt.Sprintf("%s %s %s %s", c.RoutingKey, c.Shard, c.ShardGroup, c.Index)
			if got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}
