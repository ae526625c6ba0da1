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
// Entries are refreshed when older than the TTL, and at once when a
// client names an unknown role or database or fails authentication with a
// cached secret, so CREATE ROLE and ALTER ROLE ... PASSWORD take effect
// for the next connection.
type roleCache struct {
	ttl   time.Duration
	fetch func(ctx context.Context) (map[string]role, map[string]bool, error)

	mu        sync.Mutex
	roles     map[string]role
	databases map[string]bool
	fetched   time.Time
}

// get returns the role and whether the database exists; with fresh it
// refetches first.
func (rc *roleCache) get(ctx context.Context, user, database string, fresh bool) (role, bool, bool, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	stale := time.Since(rc.fetched) > rc.ttl
	_, known := rc.roles[user]
	if fresh || stale || !known || !rc.databases[database] {
		roles, dbs, err := rc.fetch(ctx)
		if err != nil {
			return role{}, false, false, err
		}
		rc.roles, rc.databases, rc.fetched = roles, dbs, time.Now()
	}
	r, ok := rc.roles[user]
	return r, ok, rc.databases[database], nil
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

// invalidate makes the next lookup fetch the roles again.
func (rc *roleCache) invalidate() {
	rc.mu.Lock()
	rc.fetched = time.Time{}
	rc.mu.Unlock()
}
