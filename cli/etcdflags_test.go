package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/tlsfiles/tlstest"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// TestEtcdTLSFlags: every command that reads the topology reaches an etcd
// that serves TLS and requires client certificates with --etcd-ca,
// --etcd-cert and --etcd-key, and is refused without them or with a
// certificate another CA signed; half a certificate is refused before
// dialing.
func TestEtcdTLSFlags(t *testing.T) {
	// Not parallel: it sets the environment.
	ca, other := tlstest.NewCA(t, "cluster"), tlstest.NewCA(t, "other")
	serverCert, serverKey := ca.Issue(t, "etcd")
	clientCert, clientKey := ca.Issue(t, "operator")
	strangerCert, strangerKey := other.Issue(t, "stranger")
	srv, err := etcdembed.Run(etcdembed.Options{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	base := []string{"topo", "apply", filepath.Join(topologies, "store_xxhash.json"), "--etcd", srv.Endpoints[0], "--cluster", "tlstest"}
	if _, errOut, code := tessera(t, base...); code == 0 {
		t.Fatalf("apply without TLS files reached etcd: %q", errOut)
	}
	if _, errOut, code := tessera(t, append(base, "--etcd-ca", ca.File, "--etcd-cert", strangerCert, "--etcd-key", strangerKey)...); code == 0 {
		t.Fatalf("apply with another CA's certificate reached etcd: %q", errOut)
	}
	if _, errOut, code := tessera(t, append(base, "--etcd-ca", ca.File, "--etcd-cert", clientCert)...); code == 0 || !strings.Contains(errOut, "both its certificate and its key") {
		t.Fatalf("a certificate without its key: exit %d, %q", code, errOut)
	}
	if out, errOut, code := tessera(t, append(base, "--etcd-ca", ca.File, "--etcd-cert", clientCert, "--etcd-key", clientKey)...); code != 0 || out != "revision 1\n" {
		t.Fatalf("apply with the cluster's files: exit %d, %q %q", code, out, errOut)
	}
	// The same files from the environment.
	t.Setenv("TESSERA_ETCD_CA", ca.File)
	t.Setenv("TESSERA_ETCD_CERT", clientCert)
	t.Setenv("TESSERA_ETCD_KEY", clientKey)
	if out, errOut, code := tessera(t, "topo", "get", "--etcd", srv.Endpoints[0], "--cluster", "tlstest"); code != 0 || !strings.Contains(out, "customer_id_xxhash") {
		t.Fatalf("get with the files from the environment: exit %d, %q %q", code, out, errOut)
	}
}

// TestEtcdCredentialFlags: --etcd-user with --etcd-password-file reach an
// etcd with authentication on; a wrong password, or a user without a
// password file, does not.
func TestEtcdCredentialFlags(t *testing.T) {
	t.Parallel()
	srv, err := etcdembed.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if err := srv.EnableAuth("root-password", "operator", "operator-password", "/tessera/"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("operator-password\n"), 0o600)
	os.WriteFile(bad, []byte("guess\n"), 0o600)
	base := []string{"topo", "apply", filepath.Join(topologies, "store_xxhash.json"), "--etcd", srv.Endpoints[0], "--cluster", "authtest"}
	if _, errOut, code := tessera(t, base...); code == 0 {
		t.Fatalf("apply without credentials reached etcd: %q", errOut)
	}
	if _, errOut, code := tessera(t, append(base, "--etcd-user", "operator", "--etcd-password-file", bad)...); code == 0 {
		t.Fatalf("apply with a wrong password reached etcd: %q", errOut)
	}
	if _, errOut, code := tessera(t, append(base, "--etcd-user", "operator")...); code == 0 || !strings.Contains(errOut, "--etcd-password-file") {
		t.Fatalf("a user without a password file: exit %d, %q", code, errOut)
	}
	if out, errOut, code := tessera(t, append(base, "--etcd-user", "operator", "--etcd-password-file", good)...); code != 0 || out != "revision 1\n" {
		t.Fatalf("apply with the user's password: exit %d, %q %q", code, out, errOut)
	}
}
