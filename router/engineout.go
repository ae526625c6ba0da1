package router

import "github.com/tesseradb/tessera/router/engine"

// engineOutput writes the rows a merge produces to the client as they
// come, in batches of outputBatch bytes, and pushes them out whenever
// the merge waits for a shard: the first rows reach the client before
// the last shard is done, and a slow client holds the merge back.
type engineOutput struct {
	c     *clientConn
	first *shardStream // its header frames the rows
	// headerSent: the first shard's header went before the first row.
	headerSent bool
	buf        []byte
	unflushed  bool // written to the client's buffer since its last flush
	rows       int64
	err        error // writing to the client failed: it is gone
}

const outputBatch = 32 << 10

func (o *engineOutput) row(r engine.Row) {
	o.rows++
	if o.err != nil {
		return
	}
	if !o.headerSent {
		o.headerSent = true
		o.buf = append(o.buf, o.first.header...)
	}
	o.buf = append(o.buf, r.Msg...)
	if len(o.buf) >= outputBatch {
		o.write()
	}
}

func (o *engineOutput) write() {
	if len(o.buf) > 0 && o.err == nil {
		o.err = o.c.write(o.buf)
		o.unflushed = true
	}
	o.buf = o.buf[:0]
}

// flushWaiting sends what the client has not received yet; a shard
// stream calls it before it waits.
func (o *engineOutput) flushWaiting() {
	o.write()
	if o.unflushed && o.err == nil {
		o.err = o.c.flush()
		o.unflushed = false
	}
}

// flushRows writes the rows not yet written (and the header with them),
// before an error ends them.
func (o *engineOutput) flushRows() error {
	o.write()
	return o.err
}

// finishRows writes the rows not yet written, or when there were none
// queues the header, before the statement's last message.
func (o *engineOutput) finishRows() error {
	if !o.headerSent {
		o.c.out = append(o.c.out, o.first.header...)
		return nil
	}
	return o.flushRows()
}
