package router

import (
	"bufio"
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/router/planner"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// In the extended protocol an INSERT ... SELECT the router runs
// (insertselect.go) is answered by the router from the statement made
// of it for the simple protocol: the client's parameters, converted to
// text by the authoritative shard (which reads binary ones exactly as
// the client's Bind would), are written into the text as typed literals
// ('text'::type), and that statement runs as a simple Query would, its
// answer kept; the router then answers the client's Parse, Bind,
// Describe, Execute and Close of the segment itself. The statement's
// description (parameter types, RETURNING's columns) is the one the
// authoritative shard gives the client's text; RETURNING rows wanted in
// binary are converted there too, in one round trip. As for split
// INSERTs and key moves, the segment must bind and execute the statement
// (without a row limit) in one batch.

// insertSelectBind is what an extended-protocol INSERT ... SELECT takes
// from its Bind. The values and codes are copies: bindParams points into
// a buffer the session reuses.
type insertSelectBind struct {
	portal  string
	p       *prepared
	formats []int16  // the parameters' format codes, as sent
	values  [][]byte // nil for NULL
	results []int16  // the result columns' format codes, as sent
}

// bindInsertSelect makes r run, on the authoritative shard's shards, the
// INSERT ... SELECT p that the client binds with params.
func (r *routed) bindInsertSelect(portal string, p *prepared, params *bindParams, shards []string) error {
	b := &insertSelectBind{portal: portal, p: p, values: make([][]byte, len(params.values))}
	for i := range params.nfmt {
		b.formats = append(b.formats, int16(binary.BigEndian.Uint16(params.formats[2*i:])))
	}
	for i, v := range params.values {
		if v != nil {
			b.values[i] = append([]byte{}, v...)
		}
	}
	res := params.results
	if len(res) < 2 || len(res) != 2+2*int(binary.BigEndian.Uint16(res)) {
		return errBadBind
	}
	for i := 2; i < len(res); i += 2 {
		b.results = append(b.results, int16(binary.BigEndian.Uint16(res[i:])))
	}
	r.mode, r.err, r.shards, r.insertSelectBind = routeInsertSelect, nil, shards, b
	return nil
}

// insertSelectAnswer is what the router answers an extended-protocol
// INSERT ... SELECT with.
type insertSelectAnswer struct {
	params  []byte   // ParameterDescription
	desc    []byte   // RowDescription, in text; nil: NoData
	rows    [][]byte // DataRows, in the client's result formats
	notices []byte
	tag     string
	// failAt is the first message that fails ('P' Parse, 'B' Bind, 'E'
	// Execute), with failure; 0 when none does.
	failAt  byte
	failure []byte
}

// fail records a failure answered at message typ.
func (a *insertSelectAnswer) fail(typ byte, msgs []byte) *insertSelectAnswer {
	a.failAt, a.failure = typ, msgs
	return a
}

// insertSelectExtended runs an extended-protocol INSERT ... SELECT
// (routeInsertSelect) and answers the client's segment.
func (c *clientConn) insertSelectExtended(ctx context.Context, r *routed, frontend []byte) (bool, error) {
	b := r.insertSelectBind
	var err error = pgerr.New(pgerr.InternalError, "an INSERT ... SELECT without its Bind")
	if b != nil {
		err = checkBoundSegment(frontend, b.portal, true, pgerr.New(pgerr.FeatureNotSupported,
			"an INSERT ... SELECT the router runs must be bound and executed (without a row limit) in one batch"))
	}
	if err != nil {
		c.out = appendError(c.out, "ERROR", err)
		c.failTx()
		return true, nil
	}
	a, err := c.runInsertSelect(ctx, r.shards[0], b)
	if err != nil {
		return true, err
	}
	if a.failAt != 0 {
		c.failTx()
	}
	c.answerSegment(frontend, a, b.results)
	return a.failAt != 0, nil
}

// runInsertSelect describes the statement, writes its parameters into
// it, runs it as a simple Query and returns its answer.
func (c *clientConn) runInsertSelect(ctx context.Context, shard string, b *insertSelectBind) (*insertSelectAnswer, error) {
	a := &insertSelectAnswer{}
	if n, lossy := c.settings.lossyFloatText(); lossy {
		return a.fail('E', appendError(nil, "ERROR", pgerr.New(pgerr.FeatureNotSupported,
			"INSERT ... SELECT with extra_float_digits %d is not supported: the router passes the rows as text", n))), nil
	}
	// Its description, as the shards' Postgres gives it for the client's
	// text and parameter types.
	fe, _ := (&pgproto3.Parse{Query: b.p.sql, ParameterOIDs: b.p.oids}).Encode(nil)
	fe, _ = (&pgproto3.Describe{ObjectType: 'S'}).Encode(fe)
	fe, _ = (&pgproto3.Sync{}).Encode(fe)
	described, failure := c.stepOn(ctx, shard, fe, 0)
	if failure != nil {
		return a.fail('P', failure), nil
	}
	var oids []uint32
	for _, m := range described {
		switch m[0] {
		case 't':
			a.params = m
			if len(m) >= 7 {
				for at := 7; at+4 <= len(m); at += 4 {
					oids = append(oids, binary.BigEndian.Uint32(m[at:]))
				}
			}
		case 'T':
			a.desc = m
		case 'N':
			a.notices = append(a.notices, m...)
		}
	}
	if len(oids) != len(b.values) {
		return a.fail('B', appendError(nil, "ERROR", pgerr.New(pgerr.ProtocolViolation,
			"bind message supplies %d parameters, but prepared statement \"%s\" requires %d", len(b.values), b.p.name, len(oids)))), nil
	}
	if a.desc != nil {
		if n := len(pgwire.RowDescriptionTypes(a.desc)); len(b.results) > 1 && len(b.results) != n {
			return a.fail('B', appendError(nil, "ERROR", pgerr.New(pgerr.ProtocolViolation,
				"bind message has %d result formats but query has %d columns", len(b.results), n))), nil
		}
	}
	sql := b.p.sql
	if len(oids) > 0 {
		literals, failure := c.paramLiterals(ctx, shard, b, oids)
		if failure != nil {
			return a.fail('B', failure), nil
		}
		refs, ok := planner.ParamRefs(sql)
		if !ok {
			return a.fail('E', appendError(nil, "ERROR", pgerr.New(pgerr.FeatureNotSupported,
				"INSERT ... SELECT through the extended protocol: the router could not find its parameters in its text (send it with the simple protocol)"))), nil
		}
		for i := len(refs) - 1; i >= 0; i-- {
			ref := refs[i]
			sql = sql[:ref.Start] + literals[ref.Number-1] + sql[ref.End:]
		}
	}
	out, err := c.captureQuery(sql)
	if err != nil {
		return nil, err
	}
	var text [][]byte
	var errs []byte
	backendMessages(out, func(typ byte, msg []byte) error {
		switch typ {
		case 'D':
			text = append(text, msg)
		case 'C':
			a.tag = string(msg[5 : len(msg)-1])
		case 'E':
			errs = append(errs, msg...)
		case 'N', 'S', 'A':
			a.notices = append(a.notices, msg...)
		}
		return nil
	})
	switch {
	case errs != nil:
		return a.fail('E', append(a.notices, errs...)), nil
	case a.tag == "":
		return a.fail('E', appendError(nil, "ERROR", pgerr.New(pgerr.InternalError, "INSERT ... SELECT ran without an answer"))), nil
	}
	a.rows = text
	if a.desc != nil && len(text) > 0 && !allText(b.results) {
		rows, failure := c.binaryRows(ctx, shard, a.desc, text, b.results)
		if failure != nil {
			return a.fail('E', failure), nil
		}
		a.rows = rows
	}
	return a, nil
}

// stepOn runs fe (ending in Sync) on shard and returns its answer's
// messages, or the messages to fail with (notices, then the error).
func (c *clientConn) stepOn(ctx context.Context, shard string, fe []byte, limit int64) ([][]byte, []byte) {
	answer, err := c.answerOf(ctx, shard, false, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: fe}, limit)
	if err != nil {
		return nil, appendError(nil, "ERROR", shardError(shard, err))
	}
	var msgs [][]byte
	var notices, failure []byte
	backendMessages(answer, func(typ byte, msg []byte) error {
		switch typ {
		case 'E':
			failure = append(failure, msg...)
		case 'N':
			notices = append(notices, msg...)
		}
		msgs = append(msgs, msg)
		return nil
	})
	if failure != nil {
		return nil, append(notices, failure...)
	}
	return msgs, nil
}

// paramLiterals returns each parameter as a literal of its type,
// ('text'::type) or (NULL::type): the authoritative shard reads the
// client's values as its Bind would (binary ones too) and writes their
// text forms and the types' names.
func (c *clientConn) paramLiterals(ctx context.Context, shard string, b *insertSelectBind, oids []uint32) ([]string, []byte) {
	var q strings.Builder
	q.WriteString("SELECT ")
	for i := range oids {
		q.WriteString("$" + strconv.Itoa(i+1) + ", ")
	}
	for i, oid := range oids {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("pg_catalog.format_type(" + strconv.FormatUint(uint64(oid), 10) + ", NULL)")
	}
	fe, _ := (&pgproto3.Parse{Query: q.String(), ParameterOIDs: oids}).Encode(nil)
	fe, _ = (&pgproto3.Bind{ParameterFormatCodes: b.formats, Parameters: b.values}).Encode(fe)
	fe, _ = (&pgproto3.Execute{}).Encode(fe)
	fe, _ = (&pgproto3.Sync{}).Encode(fe)
	msgs, failure := c.stepOn(ctx, shard, fe, c.settings.gatherLimitBytes())
	if failure != nil {
		return nil, failure
	}
	var row [][]byte
	if rows := dataRows(msgs); len(rows) == 1 {
		row = pgwire.DataRowValues(rows[0])
	}
	if len(row) != 2*len(oids) {
		return nil, appendError(nil, "ERROR", pgerr.New(pgerr.InternalError, "shard %s gave %d values for %d parameters", shard, len(row), len(oids)))
	}
	literals := make([]string, len(oids))
	for i := range oids {
		typ := string(row[len(oids)+i])
		if row[i] == nil {
			literals[i] = "(NULL::" + typ + ")"
		} else {
			literals[i] = "(" + pgwire.QuoteLiteral(string(row[i])) + "::" + typ + ")"
		}
	}
	return literals, nil
}

// captureQuery runs sql as the client's simple Query and returns its
// answer's messages, kept from the client. A batch is running: its state
// (c.batch) is not the Query's to touch, and nothing the Query does
// reaches the client, its ReadyForQuery included. Its rows are as many
// as the SELECT's, which tessera.gather_limit bounds.
func (c *clientConn) captureQuery(sql string) ([]byte, error) {
	sink := &captureSink{limit: math.MaxInt64}
	c.wmu.Lock()
	saved, savedOut := c.w, c.out
	c.w, c.out = bufio.NewWriter(sink), nil
	c.wmu.Unlock()
	err := c.simpleQuery(queryMessage(sql))
	c.wmu.Lock()
	c.w.Flush()
	sink.Write(c.out)
	c.w, c.out = saved, savedOut
	c.wmu.Unlock()
	return sink.kept, err
}

// dataRows are the DataRows among a step's messages.
func dataRows(msgs [][]byte) [][]byte {
	var out [][]byte
	for _, m := range msgs {
		if len(m) > 0 && m[0] == 'D' {
			out = append(out, m)
		}
	}
	return out
}

// allText reports result format codes asking for text only.
func allText(formats []int16) bool {
	for _, f := range formats {
		if f != 0 {
			return false
		}
	}
	return true
}

// binaryRows converts rows, DataRows in text of the columns desc
// describes, to the client's result formats on the authoritative shard:
// one SELECT of the columns as parameters, bound once per row.
func (c *clientConn) binaryRows(ctx context.Context, shard string, desc []byte, rows [][]byte, results []int16) ([][]byte, []byte) {
	oids := pgwire.RowDescriptionTypes(desc)
	params := make([]string, len(oids))
	for i := range oids {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	fe, _ := (&pgproto3.Parse{Query: "SELECT " + strings.Join(params, ", "), ParameterOIDs: oids}).Encode(nil)
	for _, row := range rows {
		fe, _ = (&pgproto3.Bind{Parameters: pgwire.DataRowValues(row), ResultFormatCodes: results}).Encode(fe)
		fe, _ = (&pgproto3.Execute{}).Encode(fe)
	}
	fe, _ = (&pgproto3.Sync{}).Encode(fe)
	msgs, failure := c.stepOn(ctx, shard, fe, c.settings.gatherLimitBytes())
	if failure != nil {
		return nil, failure
	}
	out := dataRows(msgs)
	if len(out) != len(rows) {
		return nil, appendError(nil, "ERROR", pgerr.New(pgerr.InternalError, "shard %s converted %d rows of %d", shard, len(out), len(rows)))
	}
	return out, nil
}

// answerSegment answers the client's messages in order from a: as
// Postgres, the messages before the one that fails are answered, then
// its error, and no more.
func (c *clientConn) answerSegment(frontend []byte, a *insertSelectAnswer, results []int16) {
	// Each message's step: Parse and Describe of the statement are
	// answered once it is parsed, Bind and Describe of the portal once it
	// is bound, Execute once it ran.
	step := map[byte]int{'P': 0, 'B': 1, 'E': 2}
	failStep := 3
	if a.failAt != 0 {
		failStep = step[a.failAt]
	}
	backendMessages(frontend, func(typ byte, msg []byte) error {
		s := -1
		switch typ {
		case 'P', 'B', 'E':
			s = step[typ]
		case 'D':
			s = 0
			if portalDescribe(msg) {
				s = 1
			}
		}
		if s >= failStep {
			c.out = append(c.out, a.failure...)
			return errStopWalk
		}
		switch typ {
		case 'P':
			c.out = appendMsg(c.out, '1')
		case 'B':
			c.out = appendMsg(c.out, '2')
		case 'D':
			portal := portalDescribe(msg)
			if !portal {
				c.out = append(c.out, a.params...)
			}
			switch {
			case a.desc == nil:
				c.out = appendMsg(c.out, 'n')
			case portal:
				c.out = append(c.out, withFormats(a.desc, results)...)
			default:
				c.out = append(c.out, a.desc...)
			}
		case 'E':
			c.out = append(c.out, a.notices...)
			for _, row := range a.rows {
				c.out = append(c.out, row...)
			}
			c.out = appendCommandComplete(c.out, a.tag)
		case 'C':
			c.out = appendMsg(c.out, '3')
		}
		return nil
	})
}

// portalDescribe reports a Describe of a portal (not of a statement).
func portalDescribe(msg []byte) bool { return len(msg) > 5 && msg[5] == 'P' }

// withFormats returns a copy of the RowDescription desc with its fields'
// format codes set from a Bind's result format codes: none for text,
// one for every column, or one each.
func withFormats(desc []byte, formats []int16) []byte {
	out := append([]byte{}, desc...)
	if len(out) < 7 {
		return out
	}
	n := int(binary.BigEndian.Uint16(out[5:]))
	at := 7
	for i := 0; i < n; i++ {
		end := strings.IndexByte(string(out[at:]), 0)
		if end < 0 || at+end+1+18 > len(out) {
			return desc
		}
		var f int16
		switch {
		case len(formats) == 1:
			f = formats[0]
		case i < len(formats):
			f = formats[i]
		}
		binary.BigEndian.PutUint16(out[at+end+1+16:], uint16(f))
		at += end + 1 + 18
	}
	return out
}
