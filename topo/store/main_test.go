package store

import (
	"fmt"
	"os"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tesseradb/tessera/dev/testwatch"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// EtcdEndpoints are those of the embedded etcd that TestMain starts for
// every test of the package; exported for the package store_test tests.
var EtcdEndpoints []string

// testClientConfig configures a client of that etcd that does not log the
// failures tests provoke on purpose.
func testClientConfig() clientv3.Config {
	return clientv3.Config{Endpoints: EtcdEndpoints, DialTimeout: DialTimeout, Logger: zap.NewNop()}
}

func TestMain(m *testing.M) {
	testwatch.Start()
	srv, err := etcdembed.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	EtcdEndpoints = srv.Endpoints
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}
