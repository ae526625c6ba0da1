package router

import (
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// copyBatch bounds how much COPY data is gathered before it is sent on.
const copyBatch = 256 << 10

// copyMessage serves client messages while COPY FROM STDIN runs: data is
// gathered and sent to the shard in batches; CopyDone or CopyFail ends it.
func (c *clientConn) copyMessage(typ byte, msg []byte) error {
	if c.copyInto != nil {
		return c.copyIntoMessage(typ, msg)
	}
	switch typ {
	case 'd':
		c.copyBuf = append(c.copyBuf, msg...)
		if len(c.copyBuf) < copyBatch {
			return nil
		}
		return c.sendCopy(false)
	case 'c', 'f':
		c.copyBuf = append(c.copyBuf, msg...)
		if c.copyExtended {
			// A COPY started by Execute ends at the client's Sync, which
			// Postgres waits for after CopyDone.
			c.copyEnded = true
			return nil
		}
		return c.sendCopy(true)
	case 'S':
		if c.copyExtended && c.copyEnded {
			c.copyBuf = append(c.copyBuf, 'S', 0, 0, 0, 4)
			return c.sendCopy(true)
		}
		// Sync during COPY data is ignored, as Postgres does.
		return nil
	case 'H':
		return nil
	}
	// Anything else aborts the COPY, as in Postgres.
	c.copyBuf = append(c.copyBuf[:0], 'f', 0, 0, 0, 5, 0)
	return c.sendCopy(true)
}

func (c *clientConn) sendCopy(last bool) error {
	b := c.copyIn
	f := forwarder{c: c}
	res, err := c.run(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: c.copyBuf}, f.emit)
	c.copyBuf = c.copyBuf[:0]
	if err != nil {
		c.copyIn, c.copyExtended, c.copyEnded = nil, false, false
		f.finish(true)
		c.out = appendError(c.out, "ERROR", err)
		c.failTx()
		c.out = appendReady(c.out, c.status())
		return nil
	}
	if err := f.finish(res.CopyIn); err != nil {
		return err
	}
	if res.CopyIn {
		return nil
	}
	c.copyIn, c.copyExtended, c.copyEnded = nil, false, false
	c.adoptStatus(b.shard, res.TxStatus)
	c.out = appendReady(c.out, c.status())
	return nil
}
