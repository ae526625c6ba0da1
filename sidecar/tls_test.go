package sidecar_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "tessera-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, roots := selfSigned(t)
	srv, err := sidecar.New(sidecar.Config{
		ShardUID: "shard-0", InstanceID: "tls", ListenAddr: "127.0.0.1:0", SessionListenAddr: "127.0.0.1:0", Secret: secret, Manager: shared,
		TLSCertFile: certFile, TLSKeyFile: keyFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := sidecar.Dial(srv.Addr(), sidecar.DialOptions{Secret: secret, TLS: &tls.Config{RootCAs: roots}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Fatalf("over TLS: %v", err)
	}
	plain, _ := sidecar.Dial(srv.Addr(), sidecar.DialOptions{Secret: secret})
	defer plain.Close()
	short, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	if _, err := plain.Status(short, &pb.StatusRequest{}); err == nil {
		t.Fatal("a plaintext client reached a TLS sidecar")
	}
	// The framed session port speaks TLS too.
	s, err := sidecar.DialSession(ctx, srv.SessionAddr(), sidecar.DialOptions{Secret: secret, TLS: &tls.Config{RootCAs: roots}}, "postgres", "postgres", "")
	if err != nil {
		t.Fatalf("framed session over TLS: %v", err)
	}
	defer s.Close()
	if got := query(t, s, pb.Mode_STATEMENT, "SELECT 'tls'").one(t); got != "tls" {
		t.Fatal(got)
	}
	if _, err := sidecar.DialSession(short, srv.SessionAddr(), sidecar.DialOptions{Secret: secret}, "postgres", "postgres", ""); err == nil {
		t.Fatal("a plaintext client opened a session on a TLS sidecar")
	}
}
