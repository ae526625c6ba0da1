package topo_test

import (
	"fmt"
	"testing"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// Seed 004: stream rows are placed by base_pk and read by shard_id. A
// stream-id generator grinds shard ids until each bucket has one; then
// bucket(hash(base_pk)) == bucket(hash(shard_id)) holds for every record
// written to its bucket's stream shard, and the router's check accepts it.
func TestSeed004StreamShardIDs(t *testing.T) {
	top := load(t, "extenddb.json")
	records := top.Resolve("extenddb", "public", "stream_records")
	stream := records.Alternate("shard_id")
	if stream == nil || records.ShardColumn() != "base_pk" {
		t.Fatalf("stream_records placed by %q with alternate %v", records.ShardColumn(), stream)
	}
	// Grind one shard id per shard, as the seed's generator does.
	idFor := map[string]string{}
	for nonce := 0; len(idFor) < 4 && nonce < 10000; nonce++ {
		id := fmt.Sprintf("shardId-3f2c8a4e-6b1d-4c9e-9a57-0d8e2b7c1f64-%016d", nonce)
		_, shard, err := records.RouteBy(stream, shardfunc.Text, shardfunc.TextFormat, []byte(id))
		if err != nil {
			t.Fatal(err)
		}
		if idFor[shard] == "" {
			idFor[shard] = id
		}
	}
	if len(idFor) != 4 {
		t.Fatalf("ground ids for %d shards, want 4", len(idFor))
	}
	accepted, refused := 0, 0
	for _, basePK := range []string{"account-123", "account-1", "account-2", "account-7", "alice"} {
		pkKey, home, err := records.Route(shardfunc.Text, shardfunc.TextFormat, []byte(basePK))
		if err != nil {
			t.Fatal(err)
		}
		for shard, id := range idFor {
			altKey, _, _ := records.RouteBy(stream, shardfunc.Text, shardfunc.TextFormat, []byte(id))
			err := records.CheckAlternateKey(pkKey, stream, altKey)
			switch {
			case shard == home && err != nil:
				t.Errorf("%s on %s with its bucket's id %s refused: %v", basePK, home, id, err)
			case shard != home && err == nil:
				t.Errorf("%s on %s with %s's id accepted", basePK, home, shard)
			case shard != home && pgerr.Code(err) != "23514":
				t.Errorf("refusal has SQLSTATE %s", pgerr.Code(err))
			case err == nil:
				accepted++
			default:
				refused++
			}
		}
	}
	if accepted != 5 || refused != 15 {
		t.Errorf("accepted %d, refused %d; want 5 and 15", accepted, refused)
	}
}
