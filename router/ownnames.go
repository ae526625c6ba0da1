package router

import (
	"context"
	"encoding/binary"
	"slices"

	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// Postgres lists a session's prepared statements, under the client's
// names, in pg_prepared_statements. Shards know them by content names
// (extended.go), which the view would show instead. Reading the view pins
// the session to its backends; before the read runs, the router prepares
// the client's named statements under their own names on that backend
// (and closes there the ones the client closed since), and from then on
// binds and describes them there by those names, so that the content
// names of the session's statements stay out of its view.

// ownOn reports whether p is prepared under the client's name on shard's
// pinned backend.
func (p *prepared) ownOn(shard string) bool {
	return len(p.ownShards) > 0 && slices.Contains(p.ownShards, shard)
}

// shardName is the name p goes by in a batch for target r: in a session
// pinned to its backends, the client's own on a single shard (prepared
// there first if needed), else its content name (proto). Transaction
// control (and SET in a transaction) runs where it is placed when it
// runs, on every shard of the transaction (runSegment), not only on
// r.shards: it goes by its content name, which the sidecar prepares
// where missing.
func (c *clientConn) shardName(p *prepared, r *routed, proto *pb.PreparedStatement) (string, bool) {
	if !c.sessionPinned || p.name == "" || r == nil || r.txControl || r.mode != routeOne || len(r.shards) != 1 {
		return proto.Name, false
	}
	shard := r.shards[0]
	if !p.ownOn(shard) {
		b, err := c.session(context.Background(), shard, c.settings.replica())
		if err != nil || !c.prepareOwn(b, shard, p) {
			return proto.Name, false
		}
	}
	return p.name, true
}

// showOwnStatements prepares the session's named statements under their
// own names on b (shard's backend), for a read of pg_prepared_statements.
func (c *clientConn) showOwnStatements(b *backendSession, shard string) {
	if closed := c.ownClosed[shard]; len(closed) > 0 {
		var fe []byte
		for _, name := range closed {
			fe = appendMsg(fe, 'C', []byte{'S'}, cstr(name))
		}
		fe = append(fe, 'S', 0, 0, 0, 4)
		if c.runOwn(b, fe) == nil {
			delete(c.ownClosed, shard)
		}
	}
	for _, p := range c.stmts {
		if !p.ownOn(shard) {
			c.prepareOwn(b, shard, p)
		}
	}
}

// prepareOwn prepares p under the client's name on b. One that fails to
// prepare (in a failed transaction, say) keeps running by its content
// name, which reports the error in its place.
func (c *clientConn) prepareOwn(b *backendSession, shard string, p *prepared) bool {
	// Closed first: the name may be one the client closed and prepared
	// again since.
	fe := appendMsg(nil, 'C', []byte{'S'}, cstr(p.name))
	fe = appendMsg(fe, 'P', cstr(p.name), cstr(p.sql), paramTypes(p.oids))
	fe = append(fe, 'S', 0, 0, 0, 4)
	if c.runOwn(b, fe) != nil {
		return false
	}
	p.ownShards = append(p.ownShards, shard)
	return true
}

// runOwn runs the router's own Close and Parse messages on b, a pinned
// backend, dropping their answer but for what the backend says unasked
// (a notification for a session that listens), which goes to the client.
func (c *clientConn) runOwn(b *backendSession, frontend []byte) error {
	var first error
	_, err := c.run(b, &pb.Batch{Mode: pb.Mode_SESSION, Frontend: frontend}, func(chunk []byte, _ bool) error {
		return backendMessages(chunk, func(typ byte, msg []byte) error {
			switch typ {
			case 'E':
				if first == nil {
					first = parseError(msg)
				}
			case 'A', 'N':
				c.out = append(c.out, msg...)
			}
			return nil
		})
	})
	if err == nil {
		err = first
	}
	return err
}

// forgetOwn notes that the client closed p: the backends that have it
// under its name close it before the view is next read.
func (c *clientConn) forgetOwn(p *prepared) {
	for _, shard := range p.ownShards {
		if c.ownClosed == nil {
			c.ownClosed = map[string][]string{}
		}
		c.ownClosed[shard] = append(c.ownClosed[shard], p.name)
	}
}

func paramTypes(oids []uint32) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(oids)))
	for _, o := range oids {
		b = binary.BigEndian.AppendUint32(b, o)
	}
	return b
}
