package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/storetest"
)

// clusters numbers cluster names, so that tests run again by -count get
// fresh keys in the one etcd.
var clusters atomic.Int64

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *store.Store {
		cli, err := clientv3.New(clientv3.Config{Endpoints: store.EtcdEndpoints, DialTimeout: store.DialTimeout, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		name := fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), clusters.Add(1))
		return store.New(cli, name)
	})
}

func TestDial(t *testing.T) {
	s, err := store.Dial(t.Context(), store.EtcdEndpoints, "dial")
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if s.Client().Ctx().Err() == nil {
		t.Error("Close left open the client Dial created")
	}
}

func TestDialFailures(t *testing.T) {
	for _, cluster := range []string{"", "a/b"} {
		if _, err := store.Dial(t.Context(), store.EtcdEndpoints, cluster); err == nil {
			t.Errorf("Dial accepted cluster name %q", cluster)
		}
	}
	// Nothing listens on port 1.
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if s, err := store.Dial(ctx, []string{"http://127.0.0.1:1"}, "c"); err == nil {
		s.Close()
		t.Error("Dial to a closed port succeeded")
	}
}

func TestNewRejectsBadCluster(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New accepted a cluster name with '/'")
		}
	}()
	store.New(nil, "a/b")
}
