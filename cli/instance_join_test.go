package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// TestFirstInstancesStartedTogether starts the first two instances of a
// new shard at the same moment. Without the shard's join lock each finds
// no primary and creates a database of its own: two primaries of one
// shard. With it, one creates the shard and the other copies it and
// streams from it. A third new instance, started after the creator's
// record is gone, is refused instead of creating a second database, and
// releases the lock.
func TestFirstInstancesStartedTogether(t *testing.T) {
	clearInstanceEnv(t)
	endpoints := etcdembed.Start(t)
	base, err := os.MkdirTemp("", "cli-join-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	const password = "pg-join-password"
	secrets := t.TempDir()
	common := []string{
		"--etcd", strings.Join(endpoints, ","), "--cluster", "join", "--shard", "s1",
		"--secret-file", writeSecret(t, secrets, "secret", "join-test-secret-0123456"),
		"--postgres-password-file", writeSecret(t, secrets, "pgpass", password),
		"--sidecar-listen", "127.0.0.1:0", "--session-listen", "127.0.0.1:0",
	}
	s, err := store.Dial(context.Background(), endpoints, "join")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	runs := map[string]*runningInstance{}
	pgAddr := map[string]string{}
	for _, id := range []string{"s1-a", "s1-b"} {
		pgAddr[id] = freeAddr(t)
		runs[id] = startInstanceRun(t, id, append(common, "--zone", "zone-"+id[3:], "--dir", filepath.Join(base, id),
			"--postgres-listen", pgAddr[id])...)
	}
	roles := map[string]string{}
	deadline := time.Now().Add(3 * time.Minute)
	for len(roles) < 2 {
		for id, r := range runs {
			select {
			case code := <-r.exit:
				r.cancel = nil
				t.Fatalf("instance %s exited %d:\n%s", id, code, r.stderr)
			default:
			}
		}
		recs, err := s.ListRecords(context.Background(), store.KindSidecar)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			if rec.Role != "" {
				roles[rec.ID] = rec.Role
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("registered: %v", roles)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var primary, replica string
	for id, role := range roles {
		switch role {
		case store.RolePrimary:
			if primary != "" {
				t.Fatalf("two primaries of one shard: %v", roles)
			}
			primary = id
		case store.RoleReplica:
			replica = id
		}
	}
	if primary == "" || replica == "" {
		t.Fatalf("roles %v, want one primary and one replica", roles)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connect(t, ctx, pgAddr[primary], password)
	var streaming int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'", replica).Scan(&streaming); err != nil || streaming != 1 {
		t.Errorf("%s does not stream from %s: %d %v", replica, primary, streaming, err)
	}
	conn.Close(ctx)

	// The creator stops (its record goes away) and the shard has no
	// state yet, as before any worker ran: a new instance must not take
	// the missing primary for an absent shard.
	runs[replica].stop(t)
	runs[primary].stop(t)
	c := startInstanceRun(t, "s1-c", append(common, "--zone", "zone-c", "--dir", filepath.Join(base, "s1-c"), "--postgres-listen", freeAddr(t))...)
	select {
	case code := <-c.exit:
		c.cancel = nil
		if want := fmt.Sprintf("created by instance %s", primary); code == 0 || !strings.Contains(c.stderr.String(), want) {
			t.Errorf("a new instance beside a stopped creator exited %d, want a refusal naming %q:\n%s", code, want, c.stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("a new instance beside a stopped creator did not stop:\n%s", c.stderr)
	}
	// The refused instance gave the join lock back (its session lives on
	// in this process, so only an unlock frees it).
	lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer lcancel()
	unlock, err := s.LockShardJoin(lctx, "s1")
	if err != nil {
		t.Fatalf("the join lock after a refused instance: %v", err)
	}
	unlock()
}
