package worker

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// TestStartValidates: a bad configuration is refused at once, naming
// every problem.
func TestStartValidates(t *testing.T) {
	_, err := Start(context.Background(), Config{Cluster: "a/b", ID: "x/y"})
	if err == nil {
		t.Fatal("an empty configuration was accepted")
	}
	for _, want := range []string{"Temporal address is required", "etcd endpoints are required", `contains '/'`, "secret is required", `id "x/y"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// TestStartWithoutTemporal: with no Temporal at the address, Start says
// so and leaves no registration behind.
func TestStartWithoutTemporal(t *testing.T) {
	endpoints := etcdembed.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = Start(ctx, Config{TemporalAddr: addr, EtcdEndpoints: endpoints, Cluster: "test", Secret: "s3cret-s3cret-s3cret", ID: "w1", Admin: true})
	if err == nil || !strings.Contains(err.Error(), "connecting to Temporal at "+addr) {
		t.Fatalf("Start: %v", err)
	}
	s, err := store.Dial(ctx, endpoints, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if recs, err := s.ListRecords(ctx, store.KindWorker); err != nil || len(recs) != 0 {
		t.Fatalf("worker records after a failed start: %v %v", recs, err)
	}
}

// TestStartReplicatorValidates: a replicator without its shard or its
// password file is refused before it connects anywhere.
func TestStartReplicatorValidates(t *testing.T) {
	_, err := StartReplicator(context.Background(), ReplicatorConfig{Cluster: "c", ReplicatorPasswordFile: "/nonexistent/pw"})
	if err == nil {
		t.Fatal("an empty configuration was accepted")
	}
	for _, want := range []string{"Temporal address is required", "etcd endpoints are required", "shard is required", "reading the password file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}
