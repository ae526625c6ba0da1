package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// TestTopoApplyAndGet drives apply, get and route against a real
// (embedded) etcd.
func TestTopoApplyAndGet(t *testing.T) {
	endpoints := etcdembed.Start(t)
	flags := []string{"--etcd", strings.Join(endpoints, ","), "--cluster", "clitest"}
	xxhash := filepath.Join(topologies, "store_xxhash.json")
	modulo := filepath.Join(topologies, "store_modulo.json")

	if _, errOut, code := tessera(t, append([]string{"topo", "get"}, flags...)...); code != 1 || !strings.Contains(errOut, "no data topology is stored") {
		t.Fatalf("get before apply: exit %d, %q", code, errOut)
	}
	if out, errOut, code := tessera(t, append([]string{"topo", "apply", xxhash, "--expected-revision", "0"}, flags...)...); code != 0 || out != "revision 1\n" {
		t.Fatalf("first apply: exit %d, %q %q", code, out, errOut)
	}
	out, errOut, code := tessera(t, append([]string{"topo", "get"}, flags...)...)
	if code != 0 || errOut != "revision 1\n" || !strings.Contains(out, `"customer_id_xxhash"`) {
		t.Fatalf("get: exit %d, %q %q", code, out, errOut)
	}
	// The placement guard: xxhash -> modulo moves both tables.
	_, errOut, code = tessera(t, append([]string{"topo", "apply", modulo}, flags...)...)
	if code != 1 || !strings.Contains(errOut, "store.public.customers") || !strings.Contains(errOut, "store.public.orders") || !strings.Contains(errOut, "55000") {
		t.Fatalf("unforced placement change: exit %d, %q", code, errOut)
	}
	// A stale compare-and-swap is refused.
	if _, errOut, code := tessera(t, append([]string{"topo", "apply", modulo, "--force", "--expected-revision", "7"}, flags...)...); code != 1 || !strings.Contains(errOut, "40001") {
		t.Fatalf("stale CAS: exit %d, %q", code, errOut)
	}
	if out, errOut, code := tessera(t, append([]string{"topo", "apply", modulo, "--force", "--expected-revision", "1"}, flags...)...); code != 0 || out != "revision 2\n" {
		t.Fatalf("forced apply: exit %d, %q %q", code, out, errOut)
	}
	// route without --file reads the stored topology: now modulo.
	out, errOut, code = tessera(t, append([]string{"topo", "route", "--table", "store.public.customers", "--type", "bigint", "42"}, flags...)...)
	if code != 0 || !strings.Contains(out, `"routing_key":"0000000000000002","shard":"customer-shard-2"`) {
		t.Fatalf("route from etcd: exit %d, %q %q", code, out, errOut)
	}
}
