package healthwatch_test

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/sidecar"
	"github.com/tesseradb/tessera/sidecar/healthwatch"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

const secret = "healthwatch-test-secret-0123"

// TestStaleSidecarCountsAsLost: a real sidecar, reached through a proxy
// that stops passing bytes (a hung sidecar process, or a network that
// drops everything without closing anything), goes quiet; the watcher is
// told the instance is lost within StaleAfter instead of trusting the
// last status forever, and hears from it again once bytes flow.
func TestStaleSidecarCountsAsLost(t *testing.T) {
	srv := startSidecar(t)
	proxy := startFreezableProxy(t, srv.Addr())

	rec := &recorder{statuses: make(chan *pb.HealthStatus, 100), lost: make(chan error, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		healthwatch.Follow(ctx, healthwatch.Config{Addr: proxy.addr, Dial: sidecar.DialOptions{Secret: secret}, StaleAfter: time.Second}, rec)
	}()
	defer func() { cancel(); <-done }()

	waitStatus(t, rec, "the first status", func(h *pb.HealthStatus) bool { return h.Serving })
	proxy.frozen.Store(true)
	frozen := time.Now()
	select {
	case err := <-rec.lost:
		t.Logf("lost %v after the sidecar went silent: %v", time.Since(frozen).Round(time.Millisecond), err)
	case <-time.After(5 * time.Second):
		t.Fatal("a sidecar silent for 5 s is still trusted (StaleAfter is 1 s)")
	}
	proxy.frozen.Store(false)
	waitStatus(t, rec, "a status once the sidecar answers again", func(h *pb.HealthStatus) bool { return h.Serving })
}

type recorder struct {
	statuses chan *pb.HealthStatus
	lost     chan error
}

func (r *recorder) Status(h *pb.HealthStatus, _ *sidecar.Client) { r.statuses <- h }
func (r *recorder) Lost(err error)                               { r.lost <- err }

func waitStatus(t *testing.T, r *recorder, what string, want func(*pb.HealthStatus) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case h := <-r.statuses:
			if want(h) {
				return
			}
		case <-r.lost:
		case <-deadline:
			t.Fatalf("no %s within 10 s", what)
		}
	}
}

func startSidecar(t *testing.T) *sidecar.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "healthwatch-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The postgres OS user must traverse it when the tests run as root.
	os.Chmod(dir, 0o755)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	inst, err := pgmanager.New(pgmanager.Config{InstanceID: "watched", Dir: filepath.Join(dir, "pg"), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close(context.Background()) })
	if err := inst.InitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inst.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv, err := sidecar.New(sidecar.Config{
		ShardUID: "shard-0", InstanceID: "watched", ListenAddr: "127.0.0.1:0", Secret: secret, Manager: inst,
		HealthInterval: 100 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(context.Background()) })
	return srv
}

// freezableProxy passes TCP bytes to target until frozen is set; then it
// holds what it reads, closing nothing, until frozen is cleared.
type freezableProxy struct {
	addr   string
	frozen atomic.Bool
}

func startFreezableProxy(t *testing.T, target string) *freezableProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezableProxy{addr: l.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		p.frozen.Store(false)
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); p.pass(out, in) }()
			go func() { defer wg.Done(); p.pass(in, out) }()
		}
	}()
	return p
}

func (p *freezableProxy) pass(dst io.WriteCloser, src io.ReadCloser) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for p.frozen.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
