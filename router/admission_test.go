package router_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/router"
)

// startRouterWith starts another router on the package's cluster with
// cfg (its listen address, store and secret filled in) and returns its
// address.
func startRouterWith(t *testing.T, cfg router.Config) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg.ListenAddr, cfg.Store, cfg.Secret = "127.0.0.1:0", cluster.Store(), cluster.Secret()
	r, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background()) })
	return r.Addr()
}

// dialRaw opens a TCP connection to addr, closed when the test ends.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startSCRAM sends a startup packet for user and reads up to the
// server's AuthenticationSASL.
func startSCRAM(t *testing.T, c net.Conn, user string) *pgproto3.Frontend {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(startupPacket(3<<16, "user", user, "database", "postgres"))
	fe := pgproto3.NewFrontend(c, c)
	msg, err := fe.Receive()
	if err != nil {
		t.Fatalf("startup: %v", err)
	}
	if _, ok := msg.(*pgproto3.AuthenticationSASL); !ok {
		t.Fatalf("startup: got %T, want AuthenticationSASL", msg)
	}
	return fe
}

// fatalAnswer reads until an ErrorResponse or the end of the connection
// and returns the error ("" and the read error when none came).
func fatalAnswer(fe *pgproto3.Frontend) (*pgproto3.ErrorResponse, error) {
	for {
		msg, err := fe.Receive()
		if err != nil {
			return nil, err
		}
		if e, ok := msg.(*pgproto3.ErrorResponse); ok {
			return e, nil
		}
	}
}

// TestPreAuthMessageLimit: before authentication a client cannot make
// the router read more than Postgres would (65535 bytes for an
// authentication message, 10000 for a startup packet): the router
// answers at once, without waiting for the body, with Postgres's words.
func TestPreAuthMessageLimit(t *testing.T) {
	addr := cluster.Info().Router
	c := dialRaw(t, addr)
	fe := startSCRAM(t, c, "postgres")
	var hdr [5]byte
	hdr[0] = 'p'
	binary.BigEndian.PutUint32(hdr[1:], 1<<20)
	c.Write(hdr[:])
	c.SetDeadline(time.Now().Add(5 * time.Second))
	e, err := fatalAnswer(fe)
	if err != nil || e.Code != "08P01" || e.Message != "invalid message length" {
		t.Errorf("oversized password message: %+v %v", e, err)
	}

	c = dialRaw(t, addr)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte{0, 1, 0, 0, 0, 3, 0, 0}) // 65536 bytes announced
	e, err = fatalAnswer(pgproto3.NewFrontend(c, c))
	if err != nil || e.Code != "08P01" || e.Message != "invalid length of startup packet" {
		t.Errorf("oversized startup packet: %+v %v", e, err)
	}
}

// TestAuthTimeout: a client that connects and says nothing, or starts
// SCRAM and stops, is disconnected when the authentication timeout
// passes, without a message, as Postgres does.
func TestAuthTimeout(t *testing.T) {
	addr := startRouterWith(t, router.Config{AuthTimeout: time.Second})
	silent := dialRaw(t, addr)
	stalled := dialRaw(t, addr)
	fe := startSCRAM(t, stalled, "postgres")
	start := time.Now()
	for name, c := range map[string]net.Conn{"silent": silent, "stalled in SCRAM": stalled} {
		c.SetDeadline(start.Add(5 * time.Second))
		var b [1]byte
		n, err := c.Read(b[:])
		if n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("%s: read %d bytes, %v; want the connection closed", name, n, err)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed after %v", d)
	}
	_ = fe
	// Logging in within the timeout is unaffected by it afterwards.
	conn, err := pgx.Connect(context.Background(), "postgres://postgres:postgres@"+addr+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	time.Sleep(1500 * time.Millisecond)
	if _, err := conn.Exec(context.Background(), "SELECT 1"); err != nil {
		t.Fatalf("after the timeout: %v", err)
	}
}

// TestConnectionLimits: max_connections and a role's CONNECTION LIMIT
// refuse a connection with Postgres's code and words; the role limit is
// compared with Postgres's own answer.
func TestConnectionLimits(t *testing.T) {
	ctx := context.Background()
	addr := startRouterWith(t, router.Config{MaxConnections: 3})
	var idle []net.Conn
	for range 3 {
		idle = append(idle, dialRaw(t, addr))
	}
	time.Sleep(100 * time.Millisecond) // let the router accept them
	_, err := pgx.Connect(ctx, "postgres://postgres:postgres@"+addr+"/postgres?sslmode=disable")
	if pe := pgErr(err); pe == nil || pe.Code != "53300" || pe.Message != "sorry, too many clients already" {
		t.Errorf("beyond max_connections: %v", err)
	}
	idle[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, "postgres://postgres:postgres@"+addr+"/postgres?sslmode=disable")
		if err == nil {
			conn.Close(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a freed place is not given back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range idle[1:] {
		c.Close()
	}

	admin := connect(t, "postgres")
	mustExec(t, admin, "DROP ROLE IF EXISTS carol", "CREATE ROLE carol LOGIN PASSWORD 'c' CONNECTION LIMIT 1")
	roleAnswer := func(dsn string) *pgconn.PgError {
		// A role created through another router is seen within a
		// second (roles.go's refreshInterval).
		first, err := pgx.Connect(ctx, dsn)
		for deadline := time.Now().Add(3 * time.Second); err != nil && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			first, err = pgx.Connect(ctx, dsn)
		}
		if err != nil {
			t.Fatalf("first connection: %v", err)
		}
		defer first.Close(ctx)
		second, err := pgx.Connect(ctx, dsn)
		if err == nil {
			second.Close(ctx)
		}
		return pgErr(err)
	}
	viaRouter := roleAnswer("postgres://carol:c@" + addr + "/postgres?sslmode=disable")
	// The sidecar's pool may keep carol's backend: Postgres would count
	// it against her limit.
	mustExec(t, direct(t, "shard-0", "postgres"), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'carol'")
	time.Sleep(200 * time.Millisecond)
	postgres := roleAnswer(strings.Replace(shardDSN(t, "shard-0", "postgres"), "postgres:postgres@", "carol:c@", 1))
	if viaRouter == nil || postgres == nil || viaRouter.Code != postgres.Code || viaRouter.Message != postgres.Message {
		t.Errorf("role limit: router %+v, Postgres %+v", viaRouter, postgres)
	} else {
		t.Logf("role limit: %s %s", viaRouter.Code, viaRouter.Message)
	}
}

func pgErr(err error) *pgconn.PgError {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// scramSalt starts a SCRAM exchange as user and returns the mechanisms
// offered and the salt the server shows.
func scramSalt(t *testing.T, addr, user string) ([]string, string) {
	t.Helper()
	c := dialRaw(t, addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(startupPacket(3<<16, "user", user, "database", "postgres"))
	fe := pgproto3.NewFrontend(c, c)
	msg, err := fe.Receive()
	if err != nil {
		t.Fatal(err)
	}
	sasl, ok := msg.(*pgproto3.AuthenticationSASL)
	if !ok {
		t.Fatalf("%s: got %T, want AuthenticationSASL", user, msg)
	}
	fe.Send(&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: []byte("n,,n=,r=0123456789abcdef")})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	msg, err = fe.Receive()
	if err != nil {
		t.Fatal(err)
	}
	cont, ok := msg.(*pgproto3.AuthenticationSASLContinue)
	if !ok {
		t.Fatalf("%s: got %T, want AuthenticationSASLContinue", user, msg)
	}
	for _, attr := range strings.Split(string(cont.Data), ",") {
		if s, ok := strings.CutPrefix(attr, "s="); ok {
			return sasl.AuthMechanisms, s
		}
	}
	t.Fatalf("no salt in %q", cont.Data)
	return nil, ""
}

// TestUnknownRoleLooksKnown: a role that does not exist is offered the
// same method as one that does, and shows the same salt on every attempt
// and every router, as a real role does, so role names cannot be probed.
func TestUnknownRoleLooksKnown(t *testing.T) {
	other := startRouterWith(t, router.Config{})
	known, knownSalt := scramSalt(t, cluster.Info().Router, "postgres")
	_, knownAgain := scramSalt(t, other, "postgres")
	if knownSalt != knownAgain {
		t.Fatalf("a real role's salt differs: %q %q", knownSalt, knownAgain)
	}
	mechs, salt := scramSalt(t, cluster.Info().Router, "no_such_role")
	if strings.Join(mechs, ",") != strings.Join(known, ",") {
		t.Errorf("unknown role offered %v, a known one %v", mechs, known)
	}
	for _, addr := range []string{cluster.Info().Router, other} {
		if _, again := scramSalt(t, addr, "no_such_role"); again != salt {
			t.Errorf("unknown role's salt changed: %q then %q", salt, again)
		}
	}
	if _, another := scramSalt(t, other, "no_such_role_2"); another == salt {
		t.Errorf("two unknown roles share salt %q", salt)
	}
}

// TestHBARules: host-based rules refuse before authentication with
// Postgres's words (as Postgres 15 writes them), and their methods
// apply.
func TestHBARules(t *testing.T) {
	ctx := context.Background()
	admin := connect(t, "postgres")
	mustExec(t, admin, "DROP ROLE IF EXISTS trusty", "CREATE ROLE trusty LOGIN")
	file := filepath.Join(t.TempDir(), "hba.conf")
	os.WriteFile(file, []byte(`
hostnossl store      all     all           reject
host      all        trusty  127.0.0.1/32  trust
hostssl   all        all     127.0.0.0/8   scram-sha-256
host      postgres   all     10.0.0.0/8    md5
`), 0o600)
	cert, key := filepath.Join(cluster.Info().DataDir, "tls", "router.crt"), filepath.Join(cluster.Info().DataDir, "tls", "router.key")
	addr := startRouterWith(t, router.Config{HBAFile: file, TLSCertFile: cert, TLSKeyFile: key})
	for _, tc := range []struct{ dsn, code, message string }{
		{"postgres:postgres@" + addr + "/postgres?sslmode=disable", "28000",
			`no pg_hba.conf entry for host "127.0.0.1", user "postgres", database "postgres", no encryption`},
		{"postgres:postgres@" + addr + "/store?sslmode=disable", "28000",
			`pg_hba.conf rejects connection for host "127.0.0.1", user "postgres", database "store", no encryption`},
		{"postgres:wrong@" + addr + "/postgres?sslmode=require", "28P01", `password authentication failed for user "postgres"`},
		{"postgres:postgres@" + addr + "/postgres?sslmode=require", "", ""},
		{"trusty@" + addr + "/postgres?sslmode=disable", "", ""},
	} {
		conn, err := pgx.Connect(ctx, "postgres://"+tc.dsn)
		if err == nil {
			conn.Close(ctx)
		}
		pe := pgErr(err)
		switch {
		case tc.code == "" && err != nil:
			t.Errorf("%s: %v", tc.dsn, err)
		case tc.code != "" && (pe == nil || pe.Code != tc.code || pe.Message != tc.message):
			t.Errorf("%s: %v, want %s %s", tc.dsn, err, tc.code, tc.message)
		}
	}
	// A bad file stops the router from starting, naming the line.
	os.WriteFile(file, []byte("host all all all md5\nhost all all all password\n"), 0o600)
	_, err := router.New(router.Config{ListenAddr: "127.0.0.1:0", Store: cluster.Store(), Secret: cluster.Secret(), HBAFile: file})
	if err == nil || !strings.Contains(err.Error(), "hba.conf:2: invalid authentication method") {
		t.Errorf("bad rules: %v", err)
	}
}
