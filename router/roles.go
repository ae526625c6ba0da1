package router

import (
	"context"
	"crypto/md5"
	"crypto/subtle"
	"encoding/hex"
	"sync"
	"time"
)

// role is what authentication needs of a pg_authid row. The verifier is
// a secret: it is never logged or shown.
type role struct {
	verifier   string
	canLogin   bool
	validUntil time.Time // zero: no expiry
	connLimit  int       // rolconnlimit: -1 for none
	superuser  bool      // rolsuper: not bound by connLimit, as in Postgres
}

// roleCache holds the roles and databases of the authoritative shard.
// Entries are refreshed when older than the TTL, at once after role DDL
// through this router (invalidate), so CREATE ROLE and ALTER ROLE ...
// PASSWORD take effect for the next connection, and when a client names
// an unknown role or database or fails authentication (missed), but then
// at most once a refreshInterval: names that do not exist cannot be used
// to hammer the authoritative shard. A refresh is shared by every login
// that needs it, and is made without holding the cache, so logins the
// cache can answer never wait for it.
type roleCache struct {
	ttl   time.Duration
	fetch func(ctx context.Context) (map[string]role, map[string]bool, error)

	mu        sync.Mutex
	roles     map[string]role
	databases map[string]bool
	fetched   time.Time
	forced    bool       // invalidate: refresh whatever the interval
	suspect   bool       // missed: refresh if the interval allows
	inflight  *roleFetch // the refresh under way, nil if none
}

// roleFetch is one refresh of the cache, which its waiters share.
type roleFetch struct {
	done chan struct{}
	err  error
}

// refreshInterval is the least time between refreshes that unknown
// names or failed logins cause.
const refreshInterval = time.Second

// roleFetchTimeout bounds one refresh, whoever waits for it.
const roleFetchTimeout = 10 * time.Second

// get returns the role, whether it exists and whether the database
// exists, refreshing the cache first if it must.
func (rc *roleCache) get(ctx context.Context, user, database string) (role, bool, bool, error) {
	rc.mu.Lock()
	r, known := rc.roles[user]
	dbExists := rc.databases[database]
	age := time.Since(rc.fetched)
	missing := !known || !dbExists || rc.suspect
	if rc.roles != nil && !rc.forced && age <= rc.ttl && !(missing && age > refreshInterval) {
		rc.mu.Unlock()
		return r, known, dbExists, nil
	}
	f := rc.inflight
	if f == nil {
		f = &roleFetch{done: make(chan struct{})}
		rc.inflight, rc.forced, rc.suspect = f, false, false
		go rc.refresh(f)
	}
	rc.mu.Unlock()
	select {
	case <-f.done:
	case <-ctx.Done():
		return role{}, false, false, ctx.Err()
	}
	if f.err != nil {
		return role{}, false, false, f.err
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	r, known = rc.roles[user]
	return r, known, rc.databases[database], nil
}

// refresh fetches the roles for f's waiters.
func (rc *roleCache) refresh(f *roleFetch) {
	ctx, cancel := context.WithTimeout(context.Background(), roleFetchTimeout)
	defer cancel()
	roles, dbs, err := rc.fetch(ctx)
	rc.mu.Lock()
	if err == nil {
		rc.roles, rc.databases, rc.fetched = roles, dbs, time.Now()
	}
	f.err = err
	rc.inflight = nil
	rc.mu.Unlock()
	close(f.done)
}

// md5Matches checks an md5 password response: the stored secret is
// "md5" + md5(password + user), the client sends
// "md5" + md5(that hex + salt).
func md5Matches(verifier string, salt [4]byte, response string) bool {
	if len(verifier) != 35 {
		return false
	}
	h := md5.Sum(append([]byte(verifier[3:]), salt[:]...))
	want := "md5" + hex.EncodeToString(h[:])
	return subtle.ConstantTimeCompare([]byte(want), []byte(response)) == 1
}

// invalidate makes the next lookup fetch the roles again: role DDL ran.
func (rc *roleCache) invalidate() {
	rc.mu.Lock()
	rc.forced = true
	rc.mu.Unlock()
}

// missed makes the next lookup fetch the roles again if the last fetch
// is older than refreshInterval: a login failed, perhaps because a
// password changed since.
func (rc *roleCache) missed() {
	rc.mu.Lock()
	rc.suspect = true
	rc.mu.Unlock()
}
