package twophase

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
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
// roles may insert (the commit point's row is written in the client's
// own transaction, as the client's role) but not read or change others'
// decisions. Because any role may insert, a 'commit' row counts only
// with its seal (Seal): a client that forged one for another
// transaction's gid (gids are public in pg_prepared_xacts) would
// otherwise make recovery commit participants whose coordinator never
// reached its commit point. The advisory lock serializes creators:
// CREATE ... IF NOT EXISTS alone races.
const EnsureDecisions = `SELECT pg_advisory_xact_lock(hashtext('_tessera.commit_decisions'));
CREATE SCHEMA IF NOT EXISTS _tessera;
CREATE TABLE IF NOT EXISTS _tessera.commit_decisions (
	gid text PRIMARY KEY,
	outcome text NOT NULL CHECK (outcome IN ('commit', 'abort')),
	decided_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE _tessera.commit_decisions ADD COLUMN IF NOT EXISTS seal text;
GRANT USAGE ON SCHEMA _tessera TO PUBLIC;
GRANT INSERT ON _tessera.commit_decisions TO PUBLIC`

// Seal is the proof, kept in a 'commit' row, that a coordinator holding
// the cluster secret wrote it: an HMAC of the gid under the secret. Only
// routers and workers know the secret; a client that can insert rows
// cannot make one.
func Seal(secret, gid string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("tessera commit decision\x00"))
	m.Write([]byte(gid))
	return hex.EncodeToString(m.Sum(nil))
}

// Committed reads a decision row (outcome and seal, as Decide's query
// returns them): gid committed only if the row says 'commit' under a
// valid seal. A row without one was not written by a coordinator: its
// gid's coordinator, arriving later, failed on the unique index and
// rolled back, so the transaction did not commit anywhere.
func Committed(secret, gid, outcome, seal string) bool {
	return outcome == Commit && hmac.Equal([]byte(seal), []byte(Seal(secret, gid)))
}

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
// The row carries the gid's seal under the cluster secret.
func RecordCommit(secret, gid string) string {
	return "SAVEPOINT tessera_commit_point;\n" +
		"INSERT INTO _tessera.commit_decisions (gid, outcome, seal) VALUES (" +
		pgwire.QuoteLiteral(gid) + ", 'commit', " + pgwire.QuoteLiteral(Seal(secret, gid)) + ")"
}

// Decide returns a query string, run on the commit point (in gid's
// database, as a role that may read the table) outside any transaction,
// whose one row is gid's final outcome and its seal (read it with
// Committed): the coordinator's 'commit' if it
// committed, else 'abort', recorded now so that the coordinator can no
// longer commit. It waits for a coordinator still inside its commit-point
// transaction, at most lockTimeout (a Postgres interval, '10s').
func Decide(gid, lockTimeout string) string {
	q := pgwire.QuoteLiteral(gid)
	return "SET LOCAL lock_timeout = " + pgwire.QuoteLiteral(lockTimeout) + ";\n" +
		"INSERT INTO _tessera.commit_decisions (gid, outcome) VALUES (" + q + ", 'abort') ON CONFLICT (gid) DO NOTHING;\n" +
		// A statement of its own: its snapshot is taken after the
		// insert's wait, so it sees the coordinator's committed row.
		"SELECT outcome, coalesce(seal, '') FROM _tessera.commit_decisions WHERE gid = " + q
}

// Finish is what a participant runs, in gid's database, once gid's outcome
// is known.
func Finish(gid string, commit bool) string {
	if commit {
		return "COMMIT PREPARED " + pgwire.QuoteLiteral(gid)
	}
	return "ROLLBACK PREPARED " + pgwire.QuoteLiteral(gid)
}
