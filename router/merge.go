package router

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router/engine"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// A read whose answers several shards must combine beyond concatenation
// (planner.MergeEngine: counts, aggregates by group, DISTINCT, ORDER BY
// with a LIMIT) runs on every shard it reaches, as written or as the
// plan's ShardSQL (with hidden columns: mergehidden.go); the router runs
// the statement's engine plan (package engine) over their rows. The first
// shard's answer frames the result: its ParseComplete, BindComplete and
// RowDescription (cut to the statement's own columns) go through, then
// the engine's rows and a CommandComplete counting them.

// errEngineRebind: an engine plan whose shards run other SQL, reached
// without a Query or a Bind to carry it (not expected).
var errEngineRebind = pgerr.New(pgerr.InternalError, "a merge across shards found no Bind to give the shards' SQL")

// rebind returns frontend with each Bind naming statement instead of the
// client's; the rest of each message is kept.
func rebind(frontend []byte, statement string) []byte {
	out := make([]byte, 0, len(frontend)+len(statement))
	backendMessages(frontend, func(typ byte, msg []byte) error {
		if typ != 'B' {
			out = append(out, msg...)
			return nil
		}
		portal, off, err := cbytes(msg, 5)
		if err == nil {
			_, off, err = cbytes(msg, off)
		}
		if err != nil {
			out = append(out, msg...)
			return nil
		}
		rest := msg[off:]
		out = append(out, 'B')
		out = binary.BigEndian.AppendUint32(out, uint32(4+len(portal)+1+len(statement)+1+len(rest)))
		out = append(append(out, portal...), 0)
		out = append(append(out, statement...), 0)
		out = append(out, rest...)
		return nil
	})
	return out
}

// scatterEngine runs r on each of its shards and answers with what r's
// engine plan makes of their rows.
func (c *clientConn) scatterEngine(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement) (bool, error) {
	if r.engine.OrdersBytes() && !c.utf8Client() {
		c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.FeatureNotSupported, "ordering text across shards with a client_encoding other than UTF8 is not supported yet"))
		c.failTx()
		return true, nil
	}
	if sql := r.engine.ShardSQL; sql != "" {
		switch {
		case len(frontend) > 0 && frontend[0] == 'Q':
			frontend = queryMessage(sql)
		case r.shardStmt != nil:
			// The client's Bind binds the shards' statement instead:
			// the same parameters, the same output columns.
			frontend = rebind(frontend, r.shardStmt.Name)
			prepared = append(append([]*pb.PreparedStatement(nil), prepared...), r.shardStmt)
		default:
			c.out = appendError(c.out, "ERROR", errEngineRebind)
			c.failTx()
			return true, nil
		}
	}
	if hidden := r.engine.Hidden; hidden > 0 && frontend[0] != 'Q' {
		var err error
		if frontend, err = withHiddenFormats(frontend, r.engine.Visible, hidden); err != nil {
			c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.ProtocolViolation, "%v", err))
			c.failTx()
			return true, nil
		}
	}
	formats := resultFormats(frontend)
	var first []byte // the first shard's answer: its messages frame ours
	inputs := make([]engine.Operator, len(r.shards))
	ok := c.eachShardAnswer(ctx, r, frontend, prepared, func(i int, answer []byte) (bool, error) {
		rows, failed, err := dataRows(answer)
		if i == 0 {
			first = answer
		}
		inputs[i] = engine.NewSource(rows)
		return failed, err
	})
	if !ok {
		return true, nil
	}
	op := r.engine.Build(inputs, func(column int) engine.Format { return formatOf(formats, column) })
	var rows []byte
	n := 0
	err := engine.Drain(op, func(row engine.Row) {
		rows = append(rows, row.Msg...)
		n++
	})
	if err != nil {
		var coded pgerr.Coded
		if !errors.As(err, &coded) {
			err = pgerr.New(pgerr.InternalError, "merging the shards' answers: %v", err)
		}
	}
	backendMessages(first, func(typ byte, msg []byte) error {
		switch typ {
		case 'D', 'Z':
		case 'T':
			if r.engine.Hidden == 0 {
				c.out = append(c.out, msg...)
				return nil
			}
			// The statement's own columns only.
			own, tErr := withoutHiddenFields(msg, r.engine.Visible)
			if tErr != nil {
				if err == nil {
					err = pgerr.New(pgerr.InternalError, "merging the shards' answers: %v", tErr)
				}
				return nil
			}
			c.out = append(c.out, own...)
		case 'C':
			if err != nil {
				// As Postgres: the statement's error where its rows and
				// CommandComplete would be.
				c.out = appendError(c.out, "ERROR", err)
				return nil
			}
			c.out = append(c.out, rows...)
			c.out = appendCommandComplete(c.out, "SELECT "+strconv.Itoa(n))
		default:
			c.out = append(c.out, msg...)
		}
		return nil
	})
	if err != nil {
		c.failTx()
		return true, nil
	}
	return false, nil
}

// utf8Client reports whether the shards send the session text in UTF-8
// (the server's encoding, unconverted): client_encoding UTF8, or
// SQL_ASCII, which Postgres does not convert.
func (c *clientConn) utf8Client() bool {
	v, ok := c.settings.get("client_encoding")
	if !ok {
		return true // the server's encoding, UTF8 (pgmanager's initdb)
	}
	v = strings.NewReplacer("-", "", "_", "", "'", "", " ", "").Replace(strings.ToLower(v))
	return v == "utf8" || v == "unicode" || v == "sqlascii"
}

// dataRows returns the DataRow messages of a shard's answer, or reports
// that the answer is an error.
func dataRows(answer []byte) (rows [][]byte, failed bool, err error) {
	err = backendMessages(answer, func(typ byte, msg []byte) error {
		switch typ {
		case 'E':
			failed = true
		case 'D':
			rows = append(rows, msg)
		}
		return nil
	})
	if failed {
		return nil, true, nil
	}
	return rows, false, err
}

// formatOf is column i's format under a Bind's result-format codes: none
// means text, one applies to every column.
func formatOf(formats []int16, i int) int16 {
	switch {
	case len(formats) == 0:
		return 0
	case len(formats) == 1:
		return formats[0]
	case i < len(formats):
		return formats[i]
	}
	return 0
}

// resultFormats returns the result-format codes of the Bind in an
// extended-protocol batch; a simple Query has none (text).
func resultFormats(frontend []byte) []int16 {
	var out []int16
	backendMessages(frontend, func(typ byte, msg []byte) error {
		if typ != 'B' {
			return nil
		}
		at, err := resultFormatsAt(msg)
		if err != nil {
			return nil
		}
		for i := range int(binary.BigEndian.Uint16(msg[at:])) {
			out = append(out, int16(binary.BigEndian.Uint16(msg[at+2+2*i:])))
		}
		return nil
	})
	return out
}
