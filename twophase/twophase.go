package twophase

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/tesseradb/tessera/pgwire"
)

// Prefix begins every gid Tessera prepares; recovery leaves other
// prepared transactions (a client's own PREPARE TRANSACTION) alone.
const Prefix = "tessera:"

// Outcomes a decision row holds.
const (
	Commit = "commit"
	Abort  = "abort"
)

// EnsureDecisions creates the decisions table in the database it runs in,
// if missing; it needs a role that may create schemas (the admin). Other
// roles may insert (a client's transaction records its own commit) but
// not read or change others' decisions. The advisory lock serializes
// creators: CREATE ... IF NOT EXISTS alone races.
const EnsureDecisions = `SELECT pg_advisory_xact_lock(hashtext('_tessera.commit_decisions'));
CREATE SCHEMA IF NOT EXISTS _tessera;
CREATE TABLE IF NOT EXISTS _tessera.commit_decisions (
	gid text PRIMARY KEY,
	outcome text NOT NULL CHECK (outcome IN ('commit', 'abort')),
	decided_at timestamptz NOT NULL DEFAULT now()
);
GRANT USAGE ON SCHEMA _tessera TO PUBLIC;
GRANT INSERT ON _tessera.commit_decisions TO PUBLIC`

// Generator names the global transactions of one coordinator process.
type Generator struct {
	id  string
	seq uint64
}

// NewGenerator returns a generator with a random id, so that no two
// routers (nor one router restarted) name two transactions alike.
func NewGenerator() *Generator {
	var b [8]byte
	rand.Read(b[:])
	return &Generator{id: hex.EncodeToString(b[:])}
}

// Next names a new global transaction whose commit point is the shard
// commitPoint. Not safe for concurrent use.
func (g *Generator) Next(commitPoint string) string {
	g.seq++
	return fmt.Sprintf("%s%s:%s:%d", Prefix, url.QueryEscape(commitPoint), g.id, g.seq)
}

// CommitPoint returns the shard that holds gid's decision, or false when
// gid is not one of Tessera's.
func CommitPoint(gid string) (string, bool) {
	rest, ok := strings.CutPrefix(gid, Prefix)
	if !ok {
		return "", false
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 || parts[0] == "" {
		return "", false
	}
	shard, err := url.QueryUnescape(parts[0])
	return shard, err == nil
}

// RecordCommit is the statement string that, run in the commit point's
// transaction, makes that transaction's commit the global commit. It
// begins with a SAVEPOINT, which fails outside a transaction block: a
// session whose backend died with the transaction (and that now runs on
// a fresh one) must not record a decision in a transaction of its own
// while the writes it stands for are gone.
func RecordCommit(gid string) string {
	return "SAVEPOINT tessera_commit_point;\n" +
		"INSERT INTO _tessera.commit_decisions (gid, outcome) VALUES (" + pgwire.QuoteLiteral(gid) + ", 'commit')"
}

// Decide returns a query string, run on the commit point (in gid's
// database, as a role that may read the table) outside any transaction,
// whose one row is gid's final outcome: the coordinator's 'commit' if it
// committed, else 'abort', recorded now so that the coordinator can no
// longer commit. It waits for a coordinator still inside its commit-point
// transaction, at most lockTimeout (a Postgres interval, '10s').
func Decide(gid, lockTimeout string) string {
	q := pgwire.QuoteLiteral(gid)
	return "SET LOCAL lock_timeout = " + pgwire.QuoteLiteral(lockTimeout) + ";\n" +
		"INSERT INTO _tessera.commit_decisions (gid, outcome) VALUES (" + q + ", 'abort') ON CONFLICT (gid) DO NOTHING;\n" +
		// A statement of its own: its snapshot is taken after the
		// insert's wait, so it sees the coordinator's committed row.
		"SELECT outcome FROM _tessera.commit_decisions WHERE gid = " + q
}

// Finish is what a participant runs, in gid's database, once gid's outcome
// is known.
func Finish(gid string, commit bool) string {
	if commit {
		return "COMMIT PREPARED " + pgwire.QuoteLiteral(gid)
	}
	return "ROLLBACK PREPARED " + pgwire.QuoteLiteral(gid)
}
