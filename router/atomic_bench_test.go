package router_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// BenchmarkTwoShardWriteTx is a transfer: a transaction that updates one
// row on each of two shards, through the router with tessera.commit
// atomic and best_effort, and the same two updates in one transaction on
// one Postgres (customer-shard-1's primary, directly). Run:
//
//	TESSERA_TEST_PORT_OFFSET=... go test -run '^$' -bench TwoShardWriteTx ./router
func BenchmarkTwoShardWriteTx(b *testing.B) {
	ctx := context.Background()
	setupConn, err := pgx.Connect(ctx, dsn("store"))
	if err != nil {
		b.Fatal(err)
	}
	defer setupConn.Close(ctx)
	for _, sql := range []string{
		"CREATE TABLE IF NOT EXISTS orders (order_id bigint, customer_id bigint, total numeric, PRIMARY KEY (customer_id, order_id))",
		fmt.Sprintf("DELETE FROM orders WHERE order_id IN (%d, %d)", atomicOrder, atomicOrder+1),
		fmt.Sprintf("INSERT INTO orders (order_id, customer_id, total) VALUES (%d, 42, 100), (%d, 1, 100), (%d, 42, 100)", atomicOrder, atomicOrder, atomicOrder+1),
	} {
		if _, err := setupConn.Exec(ctx, sql); err != nil {
			b.Fatal(err)
		}
	}
	// transfer moves 1 from account (order, customer) from to to.
	transfer := func(b *testing.B, conn *pgx.Conn, from, to [2]int) {
		for b.Loop() {
			batch := &pgx.Batch{}
			batch.Queue("BEGIN")
			batch.Queue(fmt.Sprintf("UPDATE orders SET total = total - 1 WHERE order_id = %d AND customer_id = %d", from[0], from[1]))
			batch.Queue(fmt.Sprintf("UPDATE orders SET total = total + 1 WHERE order_id = %d AND customer_id = %d", to[0], to[1]))
			batch.Queue("COMMIT")
			if err := conn.SendBatch(ctx, batch).Close(); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, mode := range []string{"atomic", "best_effort"} {
		b.Run(mode, func(b *testing.B) {
			conn, err := pgx.Connect(ctx, dsn("store"))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "SET tessera.commit = '"+mode+"'"); err != nil {
				b.Fatal(err)
			}
			// customer-shard-1 → customer-shard-2
			transfer(b, conn, [2]int{atomicOrder, 42}, [2]int{atomicOrder, 1})
		})
	}
	b.Run("one_postgres", func(b *testing.B) {
		var primary string
		for _, s := range cluster.Info().Shards {
			for _, in := range s.Instances {
				if s.UID == "customer-shard-1" && in.Role == "primary" {
					primary = fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/store?sslmode=disable", in.Port)
				}
			}
		}
		conn, err := pgx.Connect(ctx, primary)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(ctx)
		// Both accounts are customer 42's, on customer-shard-1.
		transfer(b, conn, [2]int{atomicOrder, 42}, [2]int{atomicOrder + 1, 42})
	})
}
