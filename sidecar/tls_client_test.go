package sidecar_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/tlsfiles"
	"github.com/tesseradb/tessera/tlsfiles/tlstest"
)

// TestTLSClientCA checks that with a client CA the sidecar serves only
// clients whose certificate that CA signed, on both ports, and that a
// client CA without TLS is refused.
func TestTLSClientCA(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "sidecars")
	serverCert, serverKey := ca.Issue(t, "sidecar")
	clientCert, clientKey := ca.Issue(t, "router")
	other := tlstest.NewCA(t, "other")
	otherCert, otherKey := other.Issue(t, "stranger")

	if _, err := sidecar.New(sidecar.Config{ShardUID: "shard-0", InstanceID: "ca", ListenAddr: "127.0.0.1:0", Secret: secret, Manager: shared,
		TLSClientCAFile: ca.File}); err == nil || !strings.Contains(err.Error(), "client CA needs TLS") {
		t.Fatalf("a client CA without TLS: %v", err)
	}
	srv, err := sidecar.New(sidecar.Config{
		ShardUID: "shard-0", InstanceID: "tls-ca", ListenAddr: "127.0.0.1:0", SessionListenAddr: "127.0.0.1:0", Secret: secret, Manager: shared,
		TLSCertFile: serverCert, TLSKeyFile: serverKey, TLSClientCAFile: ca.File,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	tlsFor := func(cert, key string) tlsfiles.Client { return tlsfiles.Client{CA: ca.File, Cert: cert, Key: key} }
	for _, tc := range []struct {
		name   string
		client tlsfiles.Client
		ok     bool
	}{
		{"signed client", tlsFor(clientCert, clientKey), true},
		{"no client certificate", tlsFor("", ""), false},
		{"client of another CA", tlsFor(otherCert, otherKey), false},
	} {
		cfg, err := tc.client.Config()
		if err != nil {
			t.Fatal(err)
		}
		c, err := sidecar.Dial(srv.Addr(), sidecar.DialOptions{Secret: secret, TLS: cfg})
		if err != nil {
			t.Fatal(err)
		}
		short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
		_, err = c.Status(short, &pb.StatusRequest{})
		c.Close()
		if (err == nil) != tc.ok {
			t.Errorf("%s: gRPC Status: %v", tc.name, err)
		}
		sess, err := sidecar.DialSession(short, srv.SessionAddr(), sidecar.DialOptions{Secret: secret, TLS: cfg}, "postgres", "postgres", "")
		cancelShort()
		if err == nil {
			sess.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s: framed session: %v", tc.name, err)
		}
	}
}
