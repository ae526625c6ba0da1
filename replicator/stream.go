package replicator

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/pgerr"
)

// publicationNameRE keeps a publication name safe inside START_REPLICATION,
// which takes no parameters.
var publicationNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// DefaultStatusInterval is how often a stream reports its applied position
// to the source when Stream.StatusInterval is zero.
const DefaultStatusInterval = time.Second

// Stream carries the changes of one source shard's tables to their target
// shards: one decoder per source fans out to all its targets. It reads the
// slot's pgoutput stream in binary mode (text output would depend on the
// source's DateStyle and TimeZone), routes each change by the target
// placement's shard function, and applies each source transaction's
// changes on each target it touches in one transaction there, in source
// commit order, with the target's replication origin advanced in that same
// transaction. It confirms to the slot only positions every target has
// durably applied, so a restarted stream neither skips a transaction (the
// slot resends everything after the confirmed position) nor applies one
// twice (a target skips what its origin says it has).
//
// Statements are idempotent (an insert is an upsert on the order key;
// updates and deletes match it), so replaying changes the copy's snapshot
// already holds converges on the source's rows.
type Stream struct {
	Workflow string
	Source   string // the source shard's uid
	// SourceConnString names the source database; replication mode is
	// added for the stream's connection.
	SourceConnString string
	Slot             string // the slot OpenSnapshot created
	Publication      string // a publication of exactly Tables, made before the slot
	Tables           []StreamTable
	Targets          []Target // each Conn used by this stream alone
	// StopAt, when set, makes Run return nil once it has applied exactly
	// the source transactions whose commit record precedes this LSN, and
	// none at or after it: the targets then hold what a snapshot exported
	// at StopAt (a slot's consistent point) holds. For VDiff's consistent
	// point, for catching up before a cutover, and tests.
	StopAt pglogrepl.LSN
	// StopAtMessage, when its Prefix is set, makes Run return nil once it
	// has applied the source transaction that wrote a transactional
	// logical decoding message with this prefix and content
	// (pg_logical_emit_message(true, prefix, content)), and so every
	// transaction that committed before it. A cutover's fence writes one
	// after locking the tables it moves: a stream that stops there has
	// applied every write those tables took.
	StopAtMessage LogicalMessage
	// StatusInterval is how often the applied position is reported;
	// zero means DefaultStatusInterval.
	StatusInterval time.Duration
	// SkipOriginPrefix, when set, makes the stream skip every source
	// transaction whose replication origin's name begins with it: the
	// ones a replicator stream applied there. After a cutover a reverse
	// stream applies the targets' writes to the sources while the forward
	// slot is kept; neither must carry the other's changes back, or each
	// change would loop between the shards for ever.
	SkipOriginPrefix string

	targetOf   map[string]int
	sourceEnd  atomic.Uint64 // the source's WAL end when last asked
	applied    atomic.Uint64 // what every target has applied
	lastCommit atomic.Int64  // unix micros of the last applied source commit

	// afterApply, when set (by tests), runs after a target commits a
	// batch of source transactions ending at end.
	afterApply func(target int, end pglogrepl.LSN)
	// batchChanges, when set (by tests), replaces maxBatchChanges.
	batchChanges int
}

// A stream applies consecutive source transactions in one target
// transaction: applied one by one, each waits for its own WAL flush on
// the target, while the source's concurrent writers share theirs, and a
// stream falls behind a few busy writers for good. A batch is applied
// when no message arrives within batchWait, when it holds maxBatchChanges
// changes or is maxBatchDelay old, and at once when the stream must stop
// (StopAt, StopAtMessage). Each source transaction stays whole and in
// order; the target's origin moves to the batch's last end.
const (
	batchWait       = 2 * time.Millisecond
	maxBatchChanges = 1000
	maxBatchDelay   = 100 * time.Millisecond
)

// LogicalMessage names a logical decoding message by prefix and content.
type LogicalMessage struct {
	Prefix  string
	Content string
}

// Lag reports how far the targets are behind the source: the WAL bytes
// between the source's end (asked every StatusInterval: the stream itself
// carries only the positions of the changes it sends) and what every
// target has applied, and, while behind, the age of the last applied
// source commit.
func (s *Stream) Lag() (bytes int64, seconds float64) {
	end, applied := s.sourceEnd.Load(), s.applied.Load()
	if end <= applied {
		return 0, 0
	}
	if us := s.lastCommit.Load(); us > 0 {
		seconds = time.Since(time.UnixMicro(us)).Seconds()
	}
	return int64(end - applied), seconds
}

// Applied is the source position every target has applied up to: a
// caller waiting for the targets to catch up compares it with the
// source's WAL position.
func (s *Stream) Applied() pglogrepl.LSN { return pglogrepl.LSN(s.applied.Load()) }

// slotBusyWait bounds how long Run waits for the slot's last holder to
// let it go (as originBusyWait for the targets' origins).
const slotBusyWait = 30 * time.Second

// Run streams changes until ctx ends (returning its error), StopAt is
// reached (returning nil), or an error stops it. Each target's Conn is
// bound to the target's replication origin: give Run connections of its
// own, and new ones when it is run again.
func (s *Stream) Run(ctx context.Context) error {
	if !slotNameRE.MatchString(s.Slot) || !publicationNameRE.MatchString(s.Publication) {
		return pgerr.New(pgerr.InvalidParameterValue, "slot %q or publication %q: use 1 to 63 lower-case letters, digits and underscores", s.Slot, s.Publication)
	}
	tables := map[string]*StreamTable{}
	for i := range s.Tables {
		tables[s.Tables[i].Table.DisplayName()] = &s.Tables[i]
	}
	source, err := pgx.Connect(ctx, s.SourceConnString)
	if err != nil {
		return fmt.Errorf("connect to the source: %w", err)
	}
	defer source.Close(context.Background())
	confirmed, err := s.checkSource(ctx, source)
	if err != nil {
		return err
	}
	s.targetOf = map[string]int{}
	origins := make([]pglogrepl.LSN, len(s.Targets))
	segments := make([][]segment, len(s.Targets))
	var start pglogrepl.LSN
	for i, tg := range s.Targets {
		s.targetOf[tg.Shard] = i
		lsn, err := setupOrigin(ctx, tg.Conn, OriginName(s.Workflow, s.Source, tg.Shard))
		if err != nil {
			return fmt.Errorf("target %s: %w", tg.Shard, err)
		}
		defer releaseOrigin(tg.Conn)
		if segments[i], err = readSegments(ctx, tg.Conn, s.Workflow, s.Source); err != nil {
			return fmt.Errorf("target %s: copy progress: %w", tg.Shard, err)
		}
		origins[i] = lsn
		if i == 0 || lsn < start {
			start = lsn
		}
	}

	cfg, err := pgconn.ParseConfig(s.SourceConnString)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("replication connection to the source: %w", err)
	}
	defer conn.Close(context.Background())
	// Starting at the lowest origin (or, with none, at the slot's
	// confirmed position, which the server also never goes below) resends
	// what some target lacks; the others skip it by their origins.
	args := []string{"proto_version '2'", "publication_names '" + s.Publication + "'", "binary 'true'"}
	if s.StopAtMessage.Prefix != "" {
		args = append(args, "messages 'true'")
	}
	// The stream run before this one (stopped, or its Replicator gone)
	// may still hold the slot until its walsender reads that its client
	// left: 55006 "replication slot ... is active for PID" until then.
	deadline := time.Now().Add(slotBusyWait)
	for {
		err = pglogrepl.StartReplication(ctx, conn, s.Slot, start, pglogrepl.StartReplicationOptions{PluginArgs: args})
		if err == nil || pgerr.Code(err) != pgerr.ObjectInUse || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("start replication from slot %s: %w", s.Slot, err)
	}

	// Report nothing below what the slot has confirmed already: older
	// Postgres versions let a lower report move it backwards.
	d := decoder{s: s, tables: tables, relations: map[uint32]*relation{}, origins: origins, segments: segments,
		pending: make([][]change, len(s.Targets)), batch: make([][]change, len(s.Targets)), applied: max(start, confirmed)}
	s.applied.Store(uint64(d.applied))
	interval := s.StatusInterval
	if interval <= 0 {
		interval = DefaultStatusInterval
	}
	nextStatus := time.Now()
	for {
		if (s.StopAt != 0 && (d.applied >= s.StopAt || d.reachedStop)) || d.reachedMessage {
			if err := s.sendStatus(ctx, conn, d.applied, false); err != nil {
				return err
			}
			endStreaming(conn)
			return nil
		}
		if !time.Now().Before(nextStatus) {
			// Asking for a reply brings a keepalive with the source's
			// position, which lets an idle stream confirm and reach StopAt.
			if err := s.sendStatus(ctx, conn, d.applied, true); err != nil {
				return err
			}
			var end pglogrepl.LSN
			if err := source.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&end); err != nil {
				return fmt.Errorf("source WAL position: %w", err)
			}
			s.sourceEnd.Store(uint64(end))
			nextStatus = time.Now().Add(interval)
		}
		deadline := nextStatus
		if soon := time.Now().Add(batchWait); d.batchEnd != 0 && soon.Before(deadline) {
			deadline = soon
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		raw, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				// Nothing more is coming for now: apply what waits.
				if err := d.flush(ctx); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("replication stream: %w", err)
		}
		switch m := raw.(type) {
		case *pgproto3.CopyData:
			if err := d.copyData(ctx, conn, m.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		}
	}
}

// checkSource refuses tables whose replica identity lacks their keys, and
// returns the position the slot has confirmed.
func (s *Stream) checkSource(ctx context.Context, conn *pgx.Conn) (pglogrepl.LSN, error) {
	for _, st := range s.Tables {
		if err := CheckReplicaIdentity(ctx, conn, st.Table); err != nil {
			return 0, err
		}
	}
	var confirmed *string
	err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", s.Slot).Scan(&confirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, pgerr.New(pgerr.UndefinedObject, "replication slot %q does not exist on the source", s.Slot)
	}
	if err != nil || confirmed == nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(*confirmed)
}

// endStreaming ends the replication command as the protocol means a
// client to: its CopyDone, which the walsender answers only after reading
// what came before it (the last status update) and which makes it release
// the slot. When Run returns at its stop, the slot has then confirmed the
// position and is free for the next stream, rather than some moments
// later (a closed socket is noticed when the walsender next reads). A
// failure is not Run's: what was applied lives in the targets' origins,
// and the slot's confirmation only bounds the WAL the source keeps.
func endStreaming(conn *pgconn.PgConn) {
	conn.Conn().SetDeadline(time.Now().Add(streamEndWait))
	pglogrepl.SendStandbyCopyDone(context.Background(), conn)
}

// streamEndWait bounds endStreaming's wait for the walsender's answer.
const streamEndWait = 10 * time.Second

func (s *Stream) sendStatus(ctx context.Context, conn *pgconn.PgConn, applied pglogrepl.LSN, reply bool) error {
	if applied == 0 {
		return nil
	}
	return pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: applied, ReplyRequested: reply,
	})
}

// decoder is one Run's decoding state.
type decoder struct {
	s         *Stream
	tables    map[string]*StreamTable
	relations map[uint32]*relation
	origins   []pglogrepl.LSN // per target: applied up to
	pending   [][]change      // per target: the open transaction's changes
	// batch holds, per target, the changes of committed source
	// transactions not applied yet; batchEnd is the last one's end (0:
	// none), batchTime its commit time, batchAt when the first was added.
	batch     [][]change
	batchEnd  pglogrepl.LSN
	batchTime time.Time
	batchAt   time.Time
	segments  [][]segment // per target: the stretches its copy wrote
	inTx      bool
	commitLSN pglogrepl.LSN // of the open transaction
	applied   pglogrepl.LSN // everything up to here is applied on every target
	// reachedStop: a transaction committing at or after Stream.StopAt
	// began; it and what follows are left for the next Run.
	reachedStop bool
	// skipTx: the open transaction carries a replication origin the
	// stream skips (Stream.SkipOriginPrefix).
	skipTx bool
	// stopTx: the open transaction wrote Stream.StopAtMessage;
	// reachedMessage: it is applied, and Run returns.
	stopTx, reachedMessage bool
}

// anyPending reports whether the open transaction changed a row for
// some target.
func (d *decoder) anyPending() bool {
	for _, changes := range d.pending {
		if len(changes) > 0 {
			return true
		}
	}
	return false
}

func (d *decoder) copyData(ctx context.Context, conn *pgconn.PgConn, data []byte) error {
	if len(data) == 0 {
		return pgerr.New(pgerr.ProtocolViolation, "empty replication message")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return err
		}
		// Every message before the keepalive is handled; with no
		// transaction open or waiting in a batch, nothing before its
		// position is still owed.
		if !d.inTx && d.batchEnd == 0 && k.ServerWALEnd > d.applied {
			d.applied = k.ServerWALEnd
		}
		d.s.applied.Store(uint64(d.applied))
		if k.ReplyRequested {
			return d.s.sendStatus(ctx, conn, d.applied, false)
		}
		return nil
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return err
		}
		return d.message(ctx, x.WALData)
	}
	return nil
}

func (d *decoder) message(ctx context.Context, walData []byte) error {
	msg, err := pglogrepl.ParseV2(walData, false)
	if err != nil {
		return fmt.Errorf("decode pgoutput message: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessageV2:
		rel, err := newRelation(&m.RelationMessage, d.tables)
		if err != nil {
			return err
		}
		d.relations[m.RelationID] = rel
	case *pglogrepl.BeginMessage:
		if d.s.StopAt != 0 && m.FinalLSN >= d.s.StopAt {
			// A snapshot exported at StopAt does not hold this
			// transaction; everything before it is applied.
			d.reachedStop = true
			return d.flush(ctx)
		}
		d.inTx, d.commitLSN, d.skipTx, d.stopTx = true, m.FinalLSN, false, false
		for i := range d.pending {
			d.pending[i] = d.pending[i][:0]
		}
	case *pglogrepl.OriginMessage:
		// pgoutput sends it after Begin, before the transaction's changes.
		d.skipTx = d.s.SkipOriginPrefix != "" && strings.HasPrefix(m.Name, d.s.SkipOriginPrefix)
	case *pglogrepl.LogicalDecodingMessageV2:
		stop := d.s.StopAtMessage
		d.stopTx = d.stopTx || (stop.Prefix != "" && m.Transactional && d.inTx &&
			m.Prefix == stop.Prefix && string(m.Content) == stop.Content)
	case *pglogrepl.InsertMessageV2:
		if d.skipTx {
			return nil
		}
		return d.insert(m.RelationID, m.Tuple)
	case *pglogrepl.UpdateMessageV2:
		if d.skipTx {
			return nil
		}
		return d.update(&m.UpdateMessage)
	case *pglogrepl.DeleteMessageV2:
		if d.skipTx {
			return nil
		}
		return d.delete(m.RelationID, m.OldTuple)
	case *pglogrepl.CommitMessage:
		return d.commit(ctx, m)
	case *pglogrepl.TruncateMessageV2:
		return pgerr.New(pgerr.FeatureNotSupported, "TRUNCATE of a table being moved is not replicated; stop the move first")
	case *pglogrepl.StreamStartMessageV2, *pglogrepl.StreamCommitMessageV2, *pglogrepl.StreamAbortMessageV2:
		return pgerr.New(pgerr.ProtocolViolation, "streamed in-progress transactions were not asked for")
	}
	// Type and logical decoding messages change nothing here.
	return nil
}

func (d *decoder) relation(id uint32) (*relation, error) {
	rel := d.relations[id]
	if rel == nil {
		return nil, pgerr.New(pgerr.ProtocolViolation, "change of relation %d before its Relation message", id)
	}
	return rel, nil
}

// add queues a change for a target, unless the target's copy of the row
// is newer than the change. A transaction that committed before a copy
// snapshot's consistent point is in that snapshot: a row copied from it
// must not take the change again (replaying it would bring back an older
// version of the row until the stream caught up). A copy resumed from a
// later snapshot makes such stretches; the first snapshot is the slot's
// own, and the slot sends nothing older.
func (d *decoder) add(target int, c change) {
	var conds []string
	for _, sg := range d.segments[target] {
		if d.commitLSN >= sg.lsn || sg.table != c.table.DisplayName() {
			continue
		}
		cond := sg.holds(c.table, &c)
		if cond == "true" {
			return // the whole table was copied after this change
		}
		conds = append(conds, cond)
	}
	if len(conds) > 0 {
		c.guard(strings.Join(conds, " OR "))
	}
	d.pending[target] = append(d.pending[target], c)
}

func (d *decoder) insert(relID uint32, tuple *pglogrepl.TupleData) error {
	rel, err := d.relation(relID)
	if err != nil {
		return err
	}
	row, err := rel.row(tuple)
	if err != nil {
		return err
	}
	target, err := rel.target(d.s, row)
	if err != nil {
		return err
	}
	c, err := rel.upsert(row)
	if err != nil {
		return err
	}
	d.add(target, c)
	return nil
}

// update applies an UPDATE. Without an old tuple the key did not change;
// with one (the key changed, or REPLICA IDENTITY FULL) the row may move:
// then it is deleted on the old target and inserted on the new one.
func (d *decoder) update(m *pglogrepl.UpdateMessage) error {
	rel, err := d.relation(m.RelationID)
	if err != nil {
		return err
	}
	row, err := rel.row(m.NewTuple)
	if err != nil {
		return err
	}
	old := row
	if m.OldTuple != nil {
		if old, err = rel.row(m.OldTuple); err != nil {
			return err
		}
		// Unchanged TOASTed values are not resent; a full old row has them.
		for j := range row {
			if row[j].kind == pglogrepl.TupleDataTypeToast && m.OldTupleType == pglogrepl.UpdateMessageTupleTypeOld &&
				old[j].kind != pglogrepl.TupleDataTypeToast {
				row[j] = old[j]
			}
		}
	}
	newTarget, err := rel.target(d.s, row)
	if err != nil {
		return err
	}
	oldTarget, err := rel.target(d.s, old)
	if err != nil {
		return err
	}
	t := rel.st.Table
	if oldTarget != newTarget || !sameOrderKey(t, old, row) {
		d.add(oldTarget, rel.delete(old))
		c, err := rel.upsert(row)
		if err != nil {
			return err
		}
		d.add(newTarget, c)
		return nil
	}
	if c, err := rel.upsert(row); err == nil {
		d.add(newTarget, c)
		return nil
	}
	// Some unchanged TOASTed value is missing: update what was sent.
	d.add(newTarget, rel.update(old, row))
	return nil
}

func (d *decoder) delete(relID uint32, tuple *pglogrepl.TupleData) error {
	rel, err := d.relation(relID)
	if err != nil {
		return err
	}
	if tuple == nil {
		return pgerr.New(pgerr.ObjectNotInPrerequisiteState, "a DELETE of %s carries no old key", rel.st.Table.DisplayName())
	}
	old, err := rel.row(tuple)
	if err != nil {
		return err
	}
	target, err := rel.target(d.s, old)
	if err != nil {
		return err
	}
	d.add(target, rel.delete(old))
	return nil
}

// commit adds the source transaction's changes to the batch, and applies
// the batch when it is full or old, or the stream stops here.
func (d *decoder) commit(ctx context.Context, m *pglogrepl.CommitMessage) error {
	end := m.TransactionEndLSN
	for i, changes := range d.pending {
		if len(changes) == 0 || end <= d.origins[i] {
			continue // nothing for this target, or applied before a restart
		}
		d.batch[i] = append(d.batch[i], changes...)
	}
	d.inTx = false
	d.reachedMessage = d.stopTx
	if d.stopTx && !d.anyPending() {
		// The fence's own transaction changes no row of the stream's
		// tables: it is left unconfirmed (neither the targets' origins nor
		// the slot move past it), so that a stream whose worker dies
		// after stopping here, before its activity is recorded as done,
		// meets the marker again when it is retried, and stops again.
		return d.flush(ctx)
	}
	if d.batchEnd == 0 {
		d.batchAt = time.Now()
	}
	d.batchEnd, d.batchTime = end, m.CommitTime
	limit := d.s.batchChanges
	if limit <= 0 {
		limit = maxBatchChanges
	}
	full := false
	for _, b := range d.batch {
		full = full || len(b) >= limit
	}
	if full || d.stopTx || (d.s.StopAt != 0 && end >= d.s.StopAt) || time.Since(d.batchAt) >= maxBatchDelay {
		return d.flush(ctx)
	}
	return nil
}

// flush applies the batch on each target in one transaction, which also
// advances the target's origin to the batch's end: all of it commits, or
// none.
func (d *decoder) flush(ctx context.Context) error {
	if d.batchEnd == 0 {
		return nil
	}
	end := d.batchEnd
	for i, changes := range d.batch {
		if len(changes) == 0 {
			continue
		}
		tg := d.s.Targets[i]
		if err := applyTransaction(ctx, tg.Conn, changes, end, d.batchTime); err != nil {
			return fmt.Errorf("apply source transactions up to %s on %s: %w", end, tg.Shard, err)
		}
		d.origins[i] = end
		d.batch[i] = changes[:0]
		if d.s.afterApply != nil {
			d.s.afterApply(i, end)
		}
	}
	d.batchEnd = 0
	d.applied = end
	d.s.applied.Store(uint64(end))
	d.s.lastCommit.Store(d.batchTime.UnixMicro())
	return nil
}
