package activities

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/twophase"
)

// Recovery of atomic commits (package twophase has the protocol): a
// router that died, or lost a participant, mid-commit leaves prepared
// transactions behind. ResolvePrepared finds them on every shard's
// primary, reads each one's decision on its commit point, and commits or
// rolls it back; then it deletes old decisions no shard still needs.

// ResolvePreparedInput says which prepared transactions recovery takes
// over and how long decisions are kept.
type ResolvePreparedInput struct {
	// OlderThan: a transaction prepared more recently is left to its
	// coordinator, which is probably still finishing it.
	OlderThan time.Duration
	// Retention: a decision older than this, whose transaction is
	// prepared nowhere, is deleted. Zero keeps decisions.
	Retention time.Duration
}

// ResolvePreparedResult is what one pass did.
type ResolvePreparedResult struct {
	Committed  []string `json:",omitempty"` // gids committed where they were prepared
	RolledBack []string `json:",omitempty"`
	// Unreached lists shards whose primary could not be read: their
	// prepared transactions wait for the next pass, and no decision was
	// deleted.
	Unreached []string `json:",omitempty"`
	Deleted   int      // decision rows deleted
}

// preparedXact is a row of pg_prepared_xacts.
type preparedXact struct {
	shard, gid, database string
	old                  bool
}

// recoveryUser is the role recovery runs as: it finishes transactions
// other roles prepared, which only a superuser may.
const recoveryUser = "postgres"

// ResolvePrepared is one recovery pass. It is idempotent: a transaction
// finished meanwhile (by its coordinator or another pass) is skipped.
func (a *Activities) ResolvePrepared(ctx context.Context, in ResolvePreparedInput) (ResolvePreparedResult, error) {
	defer heartbeating(ctx)()
	var res ResolvePreparedResult
	primaries, unreached, err := a.primaries(ctx)
	if err != nil {
		return res, err
	}
	res.Unreached = unreached
	var xacts []preparedXact
	for _, shard := range sortedKeys(primaries) {
		found, err := a.listPrepared(ctx, primaries[shard], shard, in.OlderThan)
		if err != nil {
			a.log.Warn("recovery: listing prepared transactions failed", "shard", shard, "err", err)
			res.Unreached = append(res.Unreached, shard)
			continue
		}
		xacts = append(xacts, found...)
	}
	var firstErr error
	for _, x := range xacts {
		if !x.old {
			continue
		}
		commit, err := a.resolve(ctx, primaries, x)
		if err != nil {
			a.log.Warn("recovery: resolving a prepared transaction failed", "gid", x.gid, "shard", x.shard, "err", err)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if commit {
			res.Committed = append(res.Committed, x.gid)
		} else {
			res.RolledBack = append(res.RolledBack, x.gid)
		}
	}
	if firstErr != nil {
		// Temporal retries the pass; what it finished stays finished.
		return res, failure(sqlState(firstErr), "resolving prepared transactions: %v", firstErr)
	}
	if in.Retention > 0 && len(res.Unreached) == 0 {
		var live []string
		for _, x := range xacts {
			live = append(live, x.gid)
		}
		for _, shard := range sortedKeys(primaries) {
			n, err := a.deleteDecisions(ctx, primaries[shard], in.Retention, live)
			if err != nil {
				a.log.Warn("recovery: deleting old decisions failed", "shard", shard, "err", err)
				continue
			}
			res.Deleted += n
		}
	}
	return res, nil
}

// primaries returns a sidecar client for each shard's primary, and the
// shards whose primary has no live sidecar.
func (a *Activities) primaries(ctx context.Context) (map[string]*sidecar.Client, []string, error) {
	states, err := a.cfg.Store.ListShardStates(ctx)
	if err != nil {
		return nil, nil, passOn(err)
	}
	recs, err := a.cfg.Store.ListRecords(ctx, store.KindSidecar)
	if err != nil {
		return nil, nil, passOn(err)
	}
	named := map[string]string{} // shard → primary by its state
	shards := map[string]bool{}
	for _, st := range states {
		named[st.Shard], shards[st.Shard] = st.Primary, true
	}
	found := map[string]store.Record{}
	for _, r := range recs {
		shards[r.ShardUID] = true
		if p := named[r.ShardUID]; p == r.InstanceID || p == "" && r.Role == store.RolePrimary {
			found[r.ShardUID] = r
		}
	}
	out := map[string]*sidecar.Client{}
	var unreached []string
	for shard := range shards {
		r, ok := found[shard]
		if !ok {
			unreached = append(unreached, shard)
			continue
		}
		c, err := a.client(r.GRPCAddr)
		if err != nil {
			unreached = append(unreached, shard)
			continue
		}
		out[shard] = c
	}
	sort.Strings(unreached)
	return out, unreached, nil
}

// listPrepared reads Tessera's prepared transactions on a primary.
func (a *Activities) listPrepared(ctx context.Context, c *sidecar.Client, shard string, olderThan time.Duration) ([]preparedXact, error) {
	rows, err := query(ctx, c, "postgres", fmt.Sprintf(
		`SELECT gid, database, (prepared < now() - interval '%d milliseconds')::text FROM pg_catalog.pg_prepared_xacts WHERE gid LIKE 'tessera:%%'`,
		olderThan.Milliseconds()))
	if err != nil {
		return nil, err
	}
	var out []preparedXact
	for _, r := range rows {
		out = append(out, preparedXact{shard: shard, gid: r[0], database: r[1], old: r[2] == "true"})
	}
	return out, nil
}

// resolve decides one prepared transaction on its commit point and
// finishes it where it is prepared.
func (a *Activities) resolve(ctx context.Context, primaries map[string]*sidecar.Client, x preparedXact) (bool, error) {
	cp, ok := twophase.CommitPoint(x.gid)
	if !ok {
		return false, fmt.Errorf("gid %q names no commit point", x.gid)
	}
	cpClient := primaries[cp]
	if cpClient == nil {
		return false, fmt.Errorf("the commit point %s of %s is not reachable", cp, x.gid)
	}
	if _, err := query(ctx, cpClient, x.database, twophase.EnsureDecisions); err != nil {
		return false, fmt.Errorf("commit point %s: %w", cp, err)
	}
	rows, err := query(ctx, cpClient, x.database, twophase.Decide(x.gid, "30s"))
	if err != nil {
		return false, fmt.Errorf("commit point %s: %w", cp, err)
	}
	if len(rows) != 1 || len(rows[0]) != 2 {
		return false, fmt.Errorf("commit point %s: no decision for %s", cp, x.gid)
	}
	commit := twophase.Committed(a.cfg.Secret, x.gid, rows[0][0], rows[0][1])
	_, err = query(ctx, primaries[x.shard], x.database, twophase.Finish(x.gid, commit))
	if sqlState(err) == "42704" {
		// Finished meanwhile (its coordinator, or another pass).
		err = nil
	}
	return commit, err
}

// deleteDecisions deletes, in every database of a primary, the decisions
// older than retention whose transaction is not in live (prepared
// somewhere).
func (a *Activities) deleteDecisions(ctx context.Context, c *sidecar.Client, retention time.Duration, live []string) (int, error) {
	dbs, err := query(ctx, c, "postgres", "SELECT datname FROM pg_catalog.pg_database WHERE datallowconn AND NOT datistemplate")
	if err != nil {
		return 0, err
	}
	quoted := make([]string, 0, len(live))
	for _, g := range live {
		quoted = append(quoted, pgwire.QuoteLiteral(g))
	}
	keep := "ARRAY[" + strings.Join(quoted, ", ") + "]::text[]"
	deleted := 0
	for _, db := range dbs {
		rows, err := query(ctx, c, db[0], `SELECT CASE WHEN to_regclass('_tessera.commit_decisions') IS NULL THEN 'absent' END`)
		if err != nil || len(rows) != 1 || rows[0][0] == "absent" {
			continue
		}
		rows, err = query(ctx, c, db[0], fmt.Sprintf(
			`WITH gone AS (DELETE FROM _tessera.commit_decisions WHERE decided_at < now() - interval '%d milliseconds' AND gid <> ALL (%s) RETURNING 1)
			 SELECT count(*)::text FROM gone`, retention.Milliseconds(), keep))
		if err != nil {
			return deleted, err
		}
		if len(rows) == 1 {
			var n int
			fmt.Sscan(rows[0][0], &n)
			deleted += n
		}
	}
	return deleted, nil
}

// query runs a query string as the recovery user in database and returns
// the text of every row, or the first error.
func query(ctx context.Context, c *sidecar.Client, database, sql string) ([][]string, error) {
	sess, err := c.OpenSession(ctx, database, recoveryUser)
	if err != nil {
		return nil, sidecar.ErrorFromStatus(err)
	}
	defer sess.Close()
	var answer []byte
	if _, err := sess.Run(&pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: pgwire.AppendQuery(nil, sql)}, func(b []byte) error {
		answer = append(answer, b...)
		return nil
	}); err != nil {
		return nil, sidecar.ErrorFromStatus(err)
	}
	var rows [][]string
	var firstErr error
	err = pgwire.Messages(answer, func(typ byte, msg []byte) error {
		switch typ {
		case 'E':
			if firstErr == nil {
				firstErr = pgwire.ParseError(msg)
			}
		case 'D':
			row, err := textRow(msg)
			if err != nil {
				return err
			}
			rows = append(rows, row)
		}
		return nil
	})
	if firstErr != nil {
		return nil, firstErr
	}
	return rows, err
}

var errBadRow = errors.New("malformed DataRow")

// textRow decodes a DataRow message (header included) of text values;
// NULL reads as "".
func textRow(msg []byte) ([]string, error) {
	if len(msg) < 7 {
		return nil, errBadRow
	}
	n := int(binary.BigEndian.Uint16(msg[5:]))
	rest := msg[7:]
	row := make([]string, 0, n)
	for range n {
		if len(rest) < 4 {
			return nil, errBadRow
		}
		size := int(int32(binary.BigEndian.Uint32(rest)))
		rest = rest[4:]
		if size < 0 {
			row = append(row, "")
			continue
		}
		if size > len(rest) {
			return nil, errBadRow
		}
		row = append(row, string(rest[:size]))
		rest = rest[size:]
	}
	return row, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
