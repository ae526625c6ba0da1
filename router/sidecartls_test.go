package router_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/router"
	"github.com/tesseradb/tessera/tlsfiles"
	"github.com/tesseradb/tessera/tlsfiles/tlstest"
)

// TestSidecarTLSRefusesPlaintext: a router told to reach the sidecars
// over TLS (tessera router --sidecar-ca) does not fall back to plaintext:
// against the package's plaintext sidecars, a client cannot log in (the
// router reads roles from shard-0 through its sidecar) and gets an error,
// while the package's own router serves it.
func TestSidecarTLSRefusesPlaintext(t *testing.T) {
	ca := tlstest.NewCA(t, "sidecars")
	tlsConfig, err := tlsfiles.Client{CA: ca.File}.Config()
	if err != nil {
		t.Fatal(err)
	}
	addr := startRouterWith(t, router.Config{SidecarTLS: tlsConfig})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/store?sslmode=disable", addr))
	if err == nil {
		var one int
		err = conn.QueryRow(ctx, "SELECT 1").Scan(&one)
		conn.Close(ctx)
	}
	if err == nil {
		t.Fatal("a router with sidecar TLS reached a plaintext sidecar")
	}
	t.Logf("refused: %v", err)
	var one int
	if err := connect(t, "store").QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the plaintext router: %v", err)
	}
}
