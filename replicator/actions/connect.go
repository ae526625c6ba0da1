package actions

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
)

// Connector returns the connection string of a shard primary's database.
// The string holds a password: it must not be logged or returned.
type Connector interface {
	ConnString(ctx context.Context, shard, database string) (string, error)
}

// ConnectorFunc adapts a function to Connector (tests use it).
type ConnectorFunc func(ctx context.Context, shard, database string) (string, error)

// ConnString calls f.
func (f ConnectorFunc) ConnString(ctx context.Context, shard, database string) (string, error) {
	return f(ctx, shard, database)
}

// DiscoveryConnector reaches a shard's recorded primary at the Postgres
// address its sidecar's discovery record gives.
type DiscoveryConnector struct {
	Store *store.Store
	User  string
	// PasswordFile holds the user's password (trailing newline ignored);
	// read at every connection.
	PasswordFile string
	// SSLMode is libpq's sslmode; empty means "prefer".
	SSLMode string
}

// InstanceConnector also reaches every live instance of a shard,
// replicas included: a failed-over source's old primary may still hold a
// movement's slot, which keeps WAL there until it is dropped.
type InstanceConnector interface {
	// InstanceConnStrings maps each instance with a live sidecar record
	// to its database's connection string.
	InstanceConnStrings(ctx context.Context, shard, database string) (map[string]string, error)
}

// ConnString implements Connector.
func (c DiscoveryConnector) ConnString(ctx context.Context, shard, database string) (string, error) {
	st, err := c.Store.GetShardState(ctx, shard)
	if err != nil {
		return "", err
	}
	if st.Primary == "" {
		return "", pgerr.New(pgerr.ObjectNotInPrerequisiteState, "shard %s has no recorded primary", shard)
	}
	recs, err := c.Store.ListRecords(ctx, store.KindSidecar)
	if err != nil {
		return "", err
	}
	addr := ""
	for _, r := range recs {
		if r.ShardUID == shard && r.InstanceID == st.Primary {
			addr = r.PostgresAddr
		}
	}
	if addr == "" {
		return "", fmt.Errorf("primary %s of shard %s has no live sidecar record with a Postgres address", st.Primary, shard)
	}
	return c.connString(st.Primary, addr, database)
}

// InstanceConnStrings implements InstanceConnector.
func (c DiscoveryConnector) InstanceConnStrings(ctx context.Context, shard, database string) (map[string]string, error) {
	recs, err := c.Store.ListRecords(ctx, store.KindSidecar)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range recs {
		if r.ShardUID != shard || r.PostgresAddr == "" {
			continue
		}
		if out[r.InstanceID], err = c.connString(r.InstanceID, r.PostgresAddr, database); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// connString is the connection string of instance's database at addr.
func (c DiscoveryConnector) connString(instance, addr, database string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("instance %s: postgres address %q: %w", instance, addr, err)
	}
	if c.PasswordFile == "" {
		return "", pgerr.New(pgerr.ConfigFileError, "the worker has no replicator password file (tessera worker --replicator-password-file)")
	}
	pw, err := os.ReadFile(c.PasswordFile)
	if err != nil {
		// The error names the file, never its content.
		return "", pgerr.New(pgerr.ConfigFileError, "reading the replicator's password file: %v", err)
	}
	sslmode := c.SSLMode
	if sslmode == "" {
		sslmode = "prefer"
	}
	return fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s sslmode=%s",
		quote(host), quote(port), quote(c.User), quote(strings.TrimRight(string(pw), "\r\n")), quote(database), quote(sslmode)), nil
}

// quote is a libpq keyword/value string's quoting.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
