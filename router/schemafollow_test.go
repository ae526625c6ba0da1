package router_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/router"
)

// TestSchemaChangeReachesOtherRouters: a second router plans a call of
// h5_sum as a plain function while no aggregate of that name exists;
// then the first router creates the aggregate. The second router must
// forget what it read of the catalog (the first announces its DDL in
// etcd) and refuse the call across shards (0A000), instead of answering
// one row per shard from its stale catalog.
func TestSchemaChangeReachesOtherRouters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	second, err := router.New(router.Config{ListenAddr: "127.0.0.1:0", Store: cluster.Store(), Secret: cluster.Secret()})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer second.Stop(context.Background())
	viaSecond, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/store?sslmode=disable", second.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer viaSecond.Close(context.Background())
	conn := connect(t, "store")
	mustExec(t, conn, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"DROP AGGREGATE IF EXISTS h5_sum (bigint)", "DROP FUNCTION IF EXISTS h5_sum (bigint)",
		"CREATE FUNCTION h5_sum (bigint) RETURNS bigint LANGUAGE sql IMMUTABLE AS 'SELECT $1'")
	t.Cleanup(func() {
		conn.Exec(context.Background(), "DROP AGGREGATE IF EXISTS h5_sum (bigint)")
		conn.Exec(context.Background(), "DROP FUNCTION IF EXISTS h5_sum (bigint)")
	})
	const call = "SELECT h5_sum(customer_id) FROM customers"
	// The second router reads the catalog: h5_sum is a plain function.
	if _, err := viaSecond.Exec(ctx, call, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("%s as a plain function through the second router: %v", call, err)
	}
	mustExec(t, conn, "DROP FUNCTION h5_sum (bigint)",
		"CREATE AGGREGATE h5_sum (bigint) (sfunc = int8pl, stype = bigint, initcond = '0')")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := viaSecond.Exec(ctx, call, pgx.QueryExecModeSimpleProtocol)
		if sqlstate(err) == "0A000" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the first router created the aggregate, the second still runs %s across shards: %v", call, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
