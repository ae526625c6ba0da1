package replicator

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
)

// slotNameRE is what Postgres accepts as a replication slot name; checking
// it here also keeps the name safe inside replication commands, which take
// no parameters.
var slotNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// Snapshot is a source snapshot exported by the creation of a logical
// replication slot: the copy reads the rows as of this snapshot, and the
// change stream of the slot starts exactly at LSN, so copy and stream
// together miss nothing and repeat nothing. The snapshot can be imported
// (SET TRANSACTION SNAPSHOT) only while the replication connection that
// exported it stays open and idle: keep the Snapshot open until every
// transaction that reads from it has begun.
type Snapshot struct {
	Name      string        // the exported snapshot, for SET TRANSACTION SNAPSHOT
	LSN       pglogrepl.LSN // the slot's consistent point: where its stream starts
	Slot      string
	Temporary bool // the slot goes away with the connection

	conn *pgconn.PgConn
}

// OpenSnapshot connects to the source database in replication mode and
// creates logical replication slot slot (output plugin pgoutput) with an
// exported snapshot. A temporary slot serves a copy resumed after the
// stream's own slot already exists: it gives a fresh snapshot and the LSN
// it corresponds to, and disappears with the connection.
//
// connString must name the database to copy from; the Replicator runs
// beside the primary and connects over its unix socket.
func OpenSnapshot(ctx context.Context, connString, slot string, temporary bool) (*Snapshot, error) {
	if !slotNameRE.MatchString(slot) {
		return nil, pgerr.New(pgerr.InvalidParameterValue,
			"replication slot name %q: use 1 to 63 lower-case letters, digits and underscores", slot)
	}
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection to the source: %w", err)
	}
	// A temporary slot of this name that exists belongs to a session
	// still open: the copy attempt before this one (stopped, or its
	// worker gone), whose walsender has not yet read that its client
	// left (42710 "already exists" until then). Wait for it, as a
	// stream waits for its slot (slotBusyWait); two copies truly running
	// at once still fail here.
	deadline := time.Now().Add(slotBusyWait)
	var res pglogrepl.CreateReplicationSlotResult
	for {
		res, err = pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
			Temporary:      temporary,
			SnapshotAction: "EXPORT_SNAPSHOT",
			Mode:           pglogrepl.LogicalReplication,
		})
		if err == nil || !temporary || pgerr.Code(err) != "42710" || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("create replication slot %s: %w", slot, err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("replication slot %s: consistent point %q: %w", slot, res.ConsistentPoint, err)
	}
	return &Snapshot{Name: res.SnapshotName, LSN: lsn, Slot: slot, Temporary: temporary, conn: conn}, nil
}

// Close ends the replication connection. The exported snapshot stops being
// importable, and a temporary slot is dropped; a permanent slot stays and
// keeps WAL from its LSN on until the stream consumes it or it is dropped.
func (s *Snapshot) Close(ctx context.Context) error {
	return s.conn.Close(ctx)
}

// BeginSnapshotRead starts, on conn (a normal connection to the same
// database), the read-only REPEATABLE READ transaction that reads as of the
// snapshot. The caller commits or rolls it back when the copy is over.
func BeginSnapshotRead(ctx context.Context, conn *pgx.Conn, snap *Snapshot) (pgx.Tx, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	// SET TRANSACTION SNAPSHOT takes no parameters; the name comes from
	// the server, and is quoted all the same.
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+pgwire.QuoteLiteral(snap.Name)); err != nil {
		tx.Rollback(context.Background())
		return nil, fmt.Errorf("import snapshot %s: %w", snap.Name, err)
	}
	return tx, nil
}

// DropSlot drops a permanent replication slot, when a copy is abandoned or
// its stream is over.
func DropSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
	return err
}

// SlotExists reports whether a replication slot exists on the source.
func SlotExists(ctx context.Context, conn *pgx.Conn, slot string) (bool, error) {
	var n int
	err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n)
	return n > 0, err
}
