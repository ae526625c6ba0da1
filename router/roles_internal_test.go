package router

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRoleCacheRefreshesAreShared: a crowd of logins naming unknown
// roles causes one refresh, not one each, and a login the cache can
// answer does not wait while a refresh is under way.
func TestRoleCacheRefreshesAreShared(t *testing.T) {
	var fetches atomic.Int32
	release := make(chan struct{})
	rc := roleCache{ttl: time.Minute, fetch: func(ctx context.Context) (map[string]role, map[string]bool, error) {
		if fetches.Add(1) > 1 {
			<-release
		}
		return map[string]role{"known": {canLogin: true}}, map[string]bool{"db": true}, nil
	}}
	ctx := context.Background()
	if _, known, _, err := rc.get(ctx, "known", "db"); err != nil || !known {
		t.Fatal(known, err)
	}
	time.Sleep(refreshInterval + 10*time.Millisecond)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc.get(ctx, fmt.Sprintf("nobody-%d", i), "db")
		}()
	}
	time.Sleep(100 * time.Millisecond) // the unknown names' refresh is under way
	start := time.Now()
	if _, known, _, err := rc.get(ctx, "known", "db"); err != nil || !known {
		t.Fatal(known, err)
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("a known role waited %v for a refresh", d)
	}
	close(release)
	wg.Wait()
	// Within the interval, unknown names cause no refresh at all.
	for i := range 100 {
		rc.get(ctx, fmt.Sprintf("nobody-%d", i), "db")
		rc.missed()
	}
	if n := fetches.Load(); n != 2 {
		t.Errorf("%d fetches, want 2", n)
	}
	// Role DDL through the router still refreshes at once.
	rc.invalidate()
	rc.get(ctx, "known", "db")
	if n := fetches.Load(); n != 3 {
		t.Errorf("after invalidate: %d fetches, want 3", n)
	}
}

// TestLoginDDLRefreshesTheRoleCache: DDL that creates, renames or drops a
// database or a role marks the statement for a refresh of the role cache,
// which also knows the databases: without it, a database created through
// this router refused logins for up to a second (pg_regress's first file
// connects right after CREATE DATABASE).
func TestLoginDDLRefreshesTheRoleCache(t *testing.T) {
	for _, sql := range []string{
		"CREATE DATABASE regress", "create database x template template0", "DROP DATABASE IF EXISTS regress",
		"ALTER DATABASE a RENAME TO b", "CREATE ROLE alice LOGIN", "ALTER USER bob PASSWORD 'x'", "DROP ROLE alice",
	} {
		if !changesLogins(sql) {
			t.Errorf("%s: does not refresh the role cache", sql)
		}
	}
	if changesLogins("CREATE TABLE t (id int)") {
		t.Error("CREATE TABLE refreshes the role cache")
	}
}
