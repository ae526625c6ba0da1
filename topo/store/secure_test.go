package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tesseradb/tessera/tlsfiles"
	"github.com/tesseradb/tessera/tlsfiles/tlstest"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// dialWithin dials as DialWith does, giving up after a few seconds (a
// refused handshake is retried by the client until its deadline).
func dialWithin(endpoints []string, opts store.DialOptions) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := store.DialWith(ctx, endpoints, "default", opts)
	if err == nil {
		s.Close()
	}
	return err
}

// TestDialTLS: an etcd serving TLS and requiring client certificates
// refuses a plaintext client, a client without a certificate, one whose
// certificate another CA signed, and a client that does not trust the
// server's CA; it serves one with the right files.
func TestDialTLS(t *testing.T) {
	t.Parallel()
	ca, other := tlstest.NewCA(t, "cluster"), tlstest.NewCA(t, "other")
	serverCert, serverKey := ca.Issue(t, "etcd")
	clientCert, clientKey := ca.Issue(t, "router")
	strangerCert, strangerKey := other.Issue(t, "stranger")
	srv, err := etcdembed.Run(etcdembed.Options{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if !strings.HasPrefix(srv.Endpoints[0], "https://") {
		t.Fatalf("endpoint %s is not https", srv.Endpoints[0])
	}
	plain := []string{"http://" + strings.TrimPrefix(srv.Endpoints[0], "https://")}
	config := func(c tlsfiles.Client) store.DialOptions {
		t.Helper()
		cfg, err := c.Config()
		if err != nil {
			t.Fatal(err)
		}
		return store.DialOptions{TLS: cfg}
	}
	for _, c := range []struct {
		name      string
		endpoints []string
		opts      store.DialOptions
	}{
		{"plaintext", plain, store.DialOptions{}},
		{"no client certificate", srv.Endpoints, config(tlsfiles.Client{CA: ca.File})},
		{"a certificate of another CA", srv.Endpoints, config(tlsfiles.Client{CA: ca.File, Cert: strangerCert, Key: strangerKey})},
		{"the server not trusted", srv.Endpoints, config(tlsfiles.Client{CA: other.File, Cert: clientCert, Key: clientKey})},
	} {
		if err := dialWithin(c.endpoints, c.opts); err == nil {
			t.Errorf("%s: etcd was reached", c.name)
		}
	}
	if err := dialWithin(srv.Endpoints, config(tlsfiles.Client{CA: ca.File, Cert: clientCert, Key: clientKey})); err != nil {
		t.Fatalf("with the cluster's files: %v", err)
	}
}

// TestDialAuth: an etcd with authentication on refuses a client without
// credentials and one with a wrong password, and serves a user whose role
// may read and write the cluster's prefix.
func TestDialAuth(t *testing.T) {
	t.Parallel()
	srv, err := etcdembed.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if err := srv.EnableAuth("root-password", "router", "router-password", "/tessera/"); err != nil {
		t.Fatal(err)
	}
	if err := dialWithin(srv.Endpoints, store.DialOptions{}); err == nil {
		t.Error("etcd with auth on was reached without credentials")
	}
	if err := dialWithin(srv.Endpoints, store.DialOptions{Username: "router", Password: "wrong"}); err == nil {
		t.Error("etcd was reached with a wrong password")
	}
	if err := dialWithin(srv.Endpoints, store.DialOptions{Username: "router", Password: "router-password"}); err != nil {
		t.Fatalf("with the user's password: %v", err)
	}
}
