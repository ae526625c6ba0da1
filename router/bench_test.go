package router

import (
	"bufio"
	"io"
	"testing"

	"github.com/tesseradb/tessera/router/planner"
)

// A point lookup's answer as a shard sends it: BindComplete, one DataRow,
// CommandComplete, ReadyForQuery.
var lookupAnswer = func() []byte {
	var b []byte
	b = appendMsg(b, '2')
	b = appendDataRow(b, "12345")
	b = appendCommandComplete(b, "SELECT 1")
	return appendReady(b, 'I')
}()

// BenchmarkForwardAnswer is the router's work on a single-shard answer:
// pass the bytes to the client, minus ReadyForQuery, without decoding.
func BenchmarkForwardAnswer(b *testing.B) {
	c := &clientConn{w: bufio.NewWriterSize(io.Discard, 32<<10)}
	b.ReportAllocs()
	b.SetBytes(int64(len(lookupAnswer)))
	for b.Loop() {
		f := forwarder{c: c}
		f.emit(lookupAnswer, true)
		if err := f.finish(false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBindParams reads a Bind's parameter frames in place.
func BenchmarkBindParams(b *testing.B) {
	bind := []byte{0, 1, 0, 1, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 42, 0, 1, 0, 1}
	var p bindParams
	b.ReportAllocs()
	for b.Loop() {
		if err := p.parse(bind); err != nil {
			b.Fatal(err)
		}
		if _, v, ok := p.param(1); !ok || len(v) != 8 {
			b.Fatal("param")
		}
	}
}

func TestForwardAnswerDropsOnlyReadyForQuery(t *testing.T) {
	var out []byte
	w := bufio.NewWriter(writerFunc(func(p []byte) (int, error) { out = append(out, p...); return len(p), nil }))
	c := &clientConn{w: w}
	f := forwarder{c: c}
	// A chunk other than the last is valid only during its call (the
	// sidecar client reuses its frame buffer).
	frame := append([]byte(nil), lookupAnswer[:10]...)
	f.emit(frame, false)
	copy(frame, "overwritten")
	f.emit(lookupAnswer[10:], true)
	f.finish(false)
	w.Flush()
	if string(out) != string(lookupAnswer[:len(lookupAnswer)-6]) {
		t.Fatalf("forwarded %q", out)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		f := forwarder{c: c}
		f.emit(lookupAnswer, true)
		f.finish(false)
	}); allocs != 0 {
		t.Errorf("forwarding allocates %.0f times", allocs)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// BenchmarkStatementAccounting is what metrics and query insights add to
// a forwarded point lookup: the answer's message headers read for its
// row count and error, the counters, the histogram and the insights
// entry.
func BenchmarkStatementAccounting(b *testing.B) {
	s := &Server{planner: planner.New(10), queryStats: newQueryStats(5000)}
	s.metrics = newRouterMetrics(s)
	c := &clientConn{srv: s, database: "bench"}
	query := []byte("SELECT v FROM t WHERE id = 42")
	b.ReportAllocs()
	for b.Loop() {
		c.statementBegins('Q')
		c.stat.ranOn("shard-0")
		c.stat.scan(lookupAnswer)
		c.statementEnds(query)
	}
}
