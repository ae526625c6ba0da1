package router

import (
	"context"
	"errors"

	"github.com/tesseradb/tessera/router/planner"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// A read that comes alone in a simple-protocol Query runs on its shard as
// a prepared statement whose parameters are its literals, which spares
// Postgres a parse and a plan per query (planner/autoprepare.go says
// which reads qualify). The client still sees the simple protocol's
// answer: the BindComplete is dropped, and the RowDescription comes from
// a Describe of the portal. If the prepared form fails before answering
// anything, the read runs again as written, so that the client gets
// Postgres's own error (with its position) for the text it sent; a read
// may run twice, as a pipelined one may.

// errAutoFallback: the prepared form failed before answering; run the
// statement as written.
var errAutoFallback = errors.New("auto-prepared statement failed; running it as written")

// maxAutoStatements bounds a connection's memo of auto-prepared
// statements' sidecar descriptions.
const maxAutoStatements = 256

// simpleStatement runs the one statement of a simple-protocol Query: as
// its prepared form when it has one and may use it, else as written.
func (c *clientConn) simpleStatement(ctx context.Context, r *routed, st *planner.Statement, msg []byte) (bool, error) {
	if !c.mayAutoPrepare(r, st) {
		return c.statement(ctx, r, msg)
	}
	fe, ok := st.AppendAutoParams(appendBindStart(c.autoFrontend[:0], st.Auto.Name, len(st.Auto.ParamOIDs)))
	if !ok {
		return c.statement(ctx, r, msg)
	}
	fe = appendAutoTail(fe)
	c.autoFrontend = fe
	c.autoPrepared[0] = c.autoStatement(st.Auto)
	r.autoPrepared = true
	failed, err := c.execute(ctx, r, fe, c.autoPrepared[:], false)
	r.autoPrepared = false
	if err == errAutoFallback {
		st.Auto.Failed()
		return c.statement(ctx, r, msg)
	}
	return failed, err
}

// mayAutoPrepare reports whether r, the only statement of a simple
// Query, may run as its prepared form: a plain read for one shard,
// outside a transaction, on a session that keeps no state in its
// backends (a client's own DEALLOCATE ALL there would make the sidecar's
// record of prepared statements wrong).
func (c *clientConn) mayAutoPrepare(r *routed, st *planner.Statement) bool {
	return st.Auto != nil && r.kind == kindRegular && r.err == nil && r.mode == routeOne && r.autocommit &&
		!c.tx.active && !c.sessionPinned && c.settings.autoPrepare() && st.Auto.Usable()
}

// autoStatement returns the sidecar's description of an auto-prepared
// statement. Descriptions are kept, not rebuilt: a sidecar session may
// keep the one it was sent.
func (c *clientConn) autoStatement(a *planner.AutoPrepared) *pb.PreparedStatement {
	if ps := c.autoStatements[a]; ps != nil {
		return ps
	}
	if c.autoStatements == nil || len(c.autoStatements) >= maxAutoStatements {
		c.autoStatements = make(map[*planner.AutoPrepared]*pb.PreparedStatement)
	}
	ps := &pb.PreparedStatement{Name: a.Name, Query: a.SQL, ParamOids: a.ParamOIDs}
	c.autoStatements[a] = ps
	return ps
}

// appendBindStart begins a Bind of the unnamed portal to statement name
// with n text parameters; the parameters follow, then appendAutoTail.
func appendBindStart(dst []byte, name string, n int) []byte {
	dst = append(dst, 'B', 0, 0, 0, 0, 0) // length, then the unnamed portal
	dst = append(dst, name...)
	dst = append(dst, 0, 0, 0) // no parameter format codes: all text
	return append(dst, byte(n>>8), byte(n))
}

// appendAutoTail ends the Bind that starts dst (all results in text, as
// the simple protocol sends them) and adds Describe of the portal,
// Execute and Sync.
func appendAutoTail(dst []byte) []byte {
	dst = append(dst, 0, 0) // no result format codes: all text
	n := len(dst) - 1
	dst[1], dst[2], dst[3], dst[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	dst = append(dst, 'D', 0, 0, 0, 6, 'P', 0)
	dst = append(dst, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0)
	return append(dst, 'S', 0, 0, 0, 4)
}

// autoFallbackCode reports an error of the prepared form that the
// statement as written would report differently, or would not meet:
// syntax and semantics (class 42), a literal's value (22), a prepared
// statement gone (26), a feature (0A). Others (a cancel, a timeout, a
// lost connection) are the statement's own answer.
func autoFallbackCode(code string) bool {
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "42", "22", "26", "0A":
		return true
	}
	return false
}

// bindComplete is the acknowledgement the simple protocol has no place for.
var bindComplete = [5]byte{'2', 0, 0, 0, 4}

// dropBindComplete removes the BindComplete that starts an auto-prepared
// statement's answer.
func dropBindComplete(chunk []byte) []byte {
	if len(chunk) >= 5 && [5]byte(chunk[:5]) == bindComplete {
		return chunk[5:]
	}
	return chunk
}
