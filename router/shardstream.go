package router

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/tesseradb/tessera/router/engine"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// A read the engine merges runs on all its shards at once, each shard's
// answer read by a goroutine of its own (the sidecar session's RunLast,
// which receives it in chunks as the sidecar sends them) into a channel
// of a few chunks. The engine's operators pull rows from the channels as
// they need them: when an operator does not take a shard's rows, its
// channel fills, its goroutine waits, and the sidecar, then Postgres,
// wait on their sockets. A slow client holds back the operators the same
// way: what the router holds for a query is a few chunks per shard, plus
// what its sorts and aggregations keep (within their memory budget).

// streamChunks is how many answer chunks (32 KiB each from the sidecar)
// a shard's channel holds.
const streamChunks = 4

// shardStream is one shard's answer to a read the engine merges, as an
// engine.Operator of its DataRows. The answer's other messages are kept
// for the client where the first shard's frame the result (header,
// trailer); an ErrorResponse ends the rows with a *shardFailure.
type shardStream struct {
	shard string
	b     *backendSession
	// analysis, under EXPLAIN (TESSERA, ANALYZE), takes the shard's
	// rows and time (analyze.go).
	analysis *analysis
	// chunks carries copies of the answer's chunks; the goroutine sets
	// res and err, then closes it.
	chunks   chan []byte
	finished chan struct{} // closed with chunks, for who does not read them
	res      sidecar.Result
	err      error
	// waiting is called before the stream waits for a chunk: the rows
	// already produced go to the client first.
	waiting func()

	cur     []byte // the unread rest of the current chunk
	ended   bool   // the channel is closed and cur read
	peeked  *engine.Row
	framing bool   // the first shard: its other messages frame the answer
	visible int    // when set, its RowDescription keeps only the first visible fields (the rest are hidden columns)
	header  []byte // its messages before the first row
	trailer []byte // and after the rows
	rowSeen bool
	failure []byte // the shard's ErrorResponse, once one came
	// notices: the answer's notices, which go to the client with its
	// error if it fails (the first shard's also frame the answer).
	notices []byte
}

// shardFailure is a shard answering with an ErrorResponse.
type shardFailure struct{ s *shardStream }

func (f *shardFailure) Error() string { return "shard " + f.s.shard + " answered with an error" }

// shardLost is a shard whose sidecar session broke mid-answer.
type shardLost struct{ s *shardStream }

func (l *shardLost) Error() string {
	if l.s.err == nil {
		return fmt.Sprintf("shard %s: its answer ended inside a message", l.s.shard)
	}
	return fmt.Sprintf("shard %s: %v", l.s.shard, l.s.err)
}

// start sends batch and reads the answer in the background. The caller
// owns b's session until the channel is closed.
func (s *shardStream) start(batch *pb.Batch) {
	s.chunks = make(chan []byte, streamChunks)
	s.finished = make(chan struct{})
	start, rows := time.Now(), int64(0)
	go func() {
		s.res, s.err = s.b.sess.RunLast(batch, func(chunk []byte, _ bool) error {
			if s.analysis != nil {
				rows += countRows(chunk)
			}
			if len(chunk) > 0 {
				// A copy: the session reuses its buffer, and the rows
				// may outlive the call (the operators keep some).
				s.chunks <- append(make([]byte, 0, len(chunk)), chunk...)
			}
			return nil
		})
		// Before the stream ends: its reader reads the figures after.
		s.analysis.add(s.shard, rows, time.Since(start))
		close(s.chunks)
		close(s.finished)
	}()
}

// done is closed once the whole answer arrived.
func (s *shardStream) done() <-chan struct{} { return s.finished }

// recv returns the next chunk, letting the client's output go first
// when none is ready.
func (s *shardStream) recv() ([]byte, bool) {
	select {
	case c, ok := <-s.chunks:
		return c, ok
	default:
	}
	if s.waiting != nil {
		s.waiting()
	}
	c, ok := <-s.chunks
	return c, ok
}

// Next returns the shard's next DataRow.
func (s *shardStream) Next() (engine.Row, bool, error) {
	if s.peeked != nil {
		r := *s.peeked
		s.peeked = nil
		return r, true, nil
	}
	for {
		if s.failure != nil {
			return engine.Row{}, false, &shardFailure{s}
		}
		if len(s.cur) < 5 || len(s.cur) < 1+int(binary.BigEndian.Uint32(s.cur[1:5])) {
			if s.ended {
				return engine.Row{}, false, s.endErr()
			}
			c, ok := s.recv()
			if !ok {
				s.ended = true
				if len(s.cur) > 0 && s.err == nil {
					return engine.Row{}, false, &shardLost{s}
				}
				continue
			}
			if len(s.cur) > 0 {
				// A message across chunks (not what the sidecar sends,
				// which cuts answers between messages): join them.
				c = append(append(make([]byte, 0, len(s.cur)+len(c)), s.cur...), c...)
			}
			s.cur = c
			continue
		}
		size := 1 + int(binary.BigEndian.Uint32(s.cur[1:5]))
		msg := s.cur[:size:size]
		s.cur = s.cur[size:]
		switch msg[0] {
		case 'D':
			s.rowSeen = true
			r, err := engine.ParseDataRow(msg)
			return r, err == nil, err
		case 'E':
			s.failure = append(s.failure, msg...)
		case 'N':
			s.notices = append(s.notices, msg...)
			if s.framing {
				s.keep(msg)
			}
		case 'C', 'Z':
		default:
			if s.framing {
				if msg[0] == 'T' && s.visible > 0 {
					own, err := withoutHiddenFields(msg, s.visible)
					if err != nil {
						return engine.Row{}, false, err
					}
					msg = own
				}
				s.keep(msg)
			}
		}
	}
}

// keep keeps a message of the first shard's that frames the answer.
func (s *shardStream) keep(msg []byte) {
	if s.rowSeen {
		s.trailer = append(s.trailer, msg...)
	} else {
		s.header = append(s.header, msg...)
	}
}

// endErr is how the answer ended: nil, or the session's failure.
func (s *shardStream) endErr() error {
	if s.err != nil {
		return &shardLost{s}
	}
	return nil
}

// peek reads up to the first row (or the end), so that the header is
// complete before any row goes out.
func (s *shardStream) peek() error {
	r, ok, err := s.Next()
	if ok {
		s.peeked = &r
	}
	return err
}

// drain reads the rest of the answer, dropping its rows, and reports how
// it ended: nil, a *shardFailure or a *shardLost.
func (s *shardStream) drain() error {
	s.waiting = nil
	s.peeked = nil
	for {
		_, ok, err := s.Next()
		if err != nil || !ok {
			break
		}
	}
	for range s.chunks {
		// What follows an error (its ReadyForQuery).
	}
	switch {
	case s.failure != nil:
		return &shardFailure{s}
	case s.err != nil || len(s.cur) > 0:
		return &shardLost{s}
	}
	return nil
}

// failureMessages is what the client gets of a failed answer: its error
// and notices.
func (s *shardStream) failureMessages() []byte {
	return append(append([]byte(nil), s.notices...), s.failure...)
}
