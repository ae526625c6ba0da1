package copysplit_test

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/dev/testwatch"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// The cluster tests: COPY ... FROM STDIN through a router in front of
// four shards (testdata/copy.json: every table of database bulk is
// sharded by its column k over shard-0, copy-1, copy-2 and copy-3) against
// the same COPY into a plain database (bulk_ref, on shard-0's Postgres),
// compared as multisets of rows, shard by shard for placement.

var (
	clusterOnce sync.Once
	cluster     *dev.Cluster
	clusterErr  error
	clusterBase string
)

// shardUIDs are the shards of the spread group.
var shardUIDs = []string{"shard-0", "copy-1", "copy-2", "copy-3"}

func TestMain(m *testing.M) {
	flag.Parse()
	testwatch.Start()
	code := m.Run()
	if cluster != nil {
		cluster.Stop(context.Background())
	}
	if clusterBase != "" {
		os.RemoveAll(clusterBase)
	}
	os.Exit(code)
}

// startCluster starts the package's cluster the first time a test needs
// it (the splitter's own tests and fuzzing need none).
func startCluster(t testing.TB) *dev.Cluster {
	t.Helper()
	clusterOnce.Do(func() {
		base, err := os.MkdirTemp("", "copysplit-test-")
		if err != nil {
			clusterErr = err
			return
		}
		clusterBase = base
		os.Chmod(base, 0o755)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cluster, clusterErr = dev.Start(ctx, dev.Config{
			DataDir:      filepath.Join(base, "data"),
			Shards:       1,
			NoReplicas:   true,
			TopologyFile: "testdata/copy.json",
			BasePort:     dev.TestPort(27233),
			EtcdPort:     -1,
			RouterPort:   -1,
		})
		if clusterErr != nil {
			log.Print(clusterErr)
			return
		}
		conn, err := pgx.Connect(ctx, routerDSN("postgres"))
		if err != nil {
			clusterErr = err
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CREATE DATABASE bulk"); err != nil {
			clusterErr = err
			return
		}
		admin, err := pgx.Connect(ctx, shardDSN("shard-0", "postgres"))
		if err != nil {
			clusterErr = err
			return
		}
		defer admin.Close(ctx)
		_, clusterErr = admin.Exec(ctx, "CREATE DATABASE bulk_ref")
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return cluster
}

func routerDSN(database string) string {
	return fmt.Sprintf("postgres://postgres:postgres@%s/%s?sslmode=disable", cluster.Info().Router, database)
}

func shardDSN(shard, database string) string {
	for _, s := range cluster.Info().Shards {
		if s.UID != shard {
			continue
		}
		for _, in := range s.Instances {
			if in.Role == "primary" {
				return fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/%s?sslmode=disable", in.Port, database)
			}
		}
	}
	return "no-primary-for-" + shard
}

func connectTo(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// env is a test's connections: through the router, to the reference
// database, and to each shard of the spread group directly.
type env struct {
	router, ref *pgx.Conn
	shards      map[string]*pgx.Conn
	top         *topo.Topology
}

func newEnv(t testing.TB) *env {
	t.Helper()
	startCluster(t)
	doc, err := os.ReadFile("testdata/copy.json")
	if err != nil {
		t.Fatal(err)
	}
	top, err := topo.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{router: connectTo(t, routerDSN("bulk")), ref: connectTo(t, shardDSN("shard-0", "bulk_ref")),
		shards: map[string]*pgx.Conn{}, top: top}
	for _, s := range shardUIDs {
		e.shards[s] = connectTo(t, shardDSN(s, "bulk"))
	}
	return e
}

// create makes table on both sides (DDL through the router reaches every
// shard), empty.
func (e *env) create(t testing.TB, table, columns string) {
	t.Helper()
	ctx := context.Background()
	for _, c := range []*pgx.Conn{e.router, e.ref} {
		for _, sql := range []string{"DROP TABLE IF EXISTS " + table, "CREATE TABLE " + table + " (" + columns + ")"} {
			if _, err := c.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
}

// rowsSQL renders every row of a table as one text value.
func rowsSQL(table string) string {
	return "SELECT t::text FROM " + table + " t"
}

// stored returns the table's rows on each shard, read directly.
func (e *env) stored(t testing.TB, table string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for s, c := range e.shards {
		out[s] = column(t, c, rowsSQL(table))
	}
	return out
}

func column(t testing.TB, c *pgx.Conn, sql string) []string {
	t.Helper()
	rows, err := c.Query(context.Background(), sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// sameRows checks that the shards together hold the rows the reference
// database holds, as multisets, and that each row is on the shard its key
// routes to (keyType is the key's Postgres type).
func (e *env) sameRows(t testing.TB, table, keyType string) {
	t.Helper()
	want := column(t, e.ref, rowsSQL(table))
	var got []string
	for _, rows := range e.stored(t, table) {
		got = append(got, rows...)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s: the shards hold %d rows, Postgres %d; first difference: %s", table, len(got), len(want), firstDifference(got, want))
	}
	e.checkPlacement(t, table, keyType)
}

func firstDifference(got, want []string) string {
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			return fmt.Sprintf("missing %q", want[i])
		case i >= len(want):
			return fmt.Sprintf("extra %q", got[i])
		case got[i] != want[i]:
			return fmt.Sprintf("got %q, want %q", got[i], want[i])
		}
	}
	return "none"
}

// checkPlacement routes each stored key (in text form) with the
// topology and checks it is on that shard.
func (e *env) checkPlacement(t testing.TB, table, keyType string) {
	t.Helper()
	p := e.top.Resolve("bulk", "public", table)
	typ, err := shardfunc.ParseColumnType(keyType)
	if err != nil {
		t.Fatal(err)
	}
	for s, c := range e.shards {
		for _, k := range column(t, c, "SELECT k::text FROM "+table+" WHERE k IS NOT NULL") {
			_, want, err := p.Route(typ, 0, []byte(k))
			if err != nil {
				t.Fatalf("%s: routing %q: %v", table, k, err)
			}
			if want != s {
				t.Fatalf("%s: key %q is on %s, routes to %s", table, k, s, want)
			}
		}
	}
}
