package planner

import "testing"

// visitsTopology shards visits by a date column over two shards.
const visitsTopology = `{
  "authoritative_shard_group": "main",
  "shard_indexes": {"day_xxhash": {"type": "xxhash", "columns": ["day"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "spread", "default_shard_index": "day_xxhash",
     "key_ranges": [{"shard_uid": "shard-1", "end": "80"}, {"shard_uid": "shard-2", "start": "80"}]}
  ],
  "databases": {"store": {"schemas": {"public": {"tables": {"visits": {"shard_group": "spread"}}}}}}
}`

// A date the router cannot read (not ISO 8601: Postgres reads it by the
// session's DateStyle) goes to every shard, each of which reads it as
// Postgres does, unless the answers would need combining; a row cannot
// be placed by one, and is refused.
func TestUnroutableDates(t *testing.T) {
	top := parseTopology(t, visitsTopology)
	for _, c := range []struct{ sql, want string }{
		{"SELECT * FROM visits WHERE day = '2024-01-12'", "select shard shard-1"},
		{"SELECT * FROM visits WHERE day = '12/01/2024'", "select shard shard-1,shard-2"},
		{"SELECT * FROM visits WHERE day IN ('2024-01-12', 'January 12, 2024')", "select shard shard-1,shard-2"},
		{"DELETE FROM visits WHERE day = '12/01/2024'", "delete shard shard-1,shard-2"},
		{"SELECT count(*) FROM visits WHERE day = '12/01/2024'", "select shard shard-1,shard-2"},
		{"SELECT day, count(*) FROM visits WHERE day = '12/01/2024' GROUP BY day", "select error 0A000"},
		{"SELECT DISTINCT v FROM visits WHERE day = '20240112'", "select error 0A000"},
		{"INSERT INTO visits (day) VALUES ('12/01/2024')", "insert error 0A000"},
		// Postgres refuses it too: the shards say so in its words.
		{"SELECT * FROM visits WHERE day = '2024-02-30'", "select shard shard-1,shard-2"},
	} {
		st := planOne(t, New(0), top, store(c.sql))
		if got := summary(st, nil); got != c.want {
			t.Errorf("%s: %s, want %s", c.sql, got, c.want)
		}
	}
}
