package router

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/router/planner"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// An UPDATE that changes a row's shard key moves the row
// (planner.KeyMove): on the shards its WHERE reaches, the UPDATE runs as
// written but returns where each new row version lies and all its
// columns; those versions are deleted; the rows go back in with one
// INSERT, split by their new key as any multi-row INSERT is
// (insertsplit.go), which carries the client's RETURNING. All of it runs
// in the client's transaction, or in one the router opens and commits
// atomically over every shard it reached (endImplicit), so that a
// failure anywhere (a unique violation on the new shard, say) leaves
// every row where it was. The client sees one UPDATE: the INSERT's
// RETURNING rows and UPDATE n.
//
// With the extended protocol the UPDATE step is bound with the client's
// parameters as it sent them (bindKeyMove) and the INSERT with its result
// formats; the router answers the client's Parse, Bind, Describe of the
// portal, Execute and Close of the segment itself, from the steps'
// answers. The segment must bind and execute the statement (without a
// row limit) in one batch; a parameter in RETURNING is refused, as the
// INSERT carries no parameters.

// keyMoveBind is what an extended-protocol key move takes from its Bind.
type keyMoveBind struct {
	portal string
	// update is the UPDATE step under its content name, with the
	// client's statement's parameter types; bind binds it to the
	// unnamed portal with the client's parameters, results in text.
	update *pb.PreparedStatement
	bind   []byte
	// results are the client's result format codes, for the INSERT.
	results []int16
}

// bindKeyMove prepares the steps of a key move bound by a client's Bind
// of p with params.
func (r *routed) bindKeyMove(portal string, p *prepared, params *bindParams) error {
	km := r.keyMove
	if km.ReturningParams {
		return pgerr.New(pgerr.FeatureNotSupported,
			"UPDATE of a shard key column with a parameter in RETURNING is not supported through the extended protocol (send it with the simple protocol)")
	}
	b := &keyMoveBind{portal: portal}
	b.update = &pb.PreparedStatement{Name: p.shardName(km.Update), Query: km.Update, ParamOids: p.oids}
	m := append([]byte{'B', 0, 0, 0, 0, 0}, b.update.Name...)
	m = append(m, 0)
	m = binary.BigEndian.AppendUint16(m, uint16(params.nfmt))
	m = append(m, params.formats...)
	m = binary.BigEndian.AppendUint16(m, uint16(len(params.values)))
	for _, v := range params.values {
		if v == nil {
			m = binary.BigEndian.AppendUint32(m, 0xffffffff)
			continue
		}
		m = binary.BigEndian.AppendUint32(m, uint32(len(v)))
		m = append(m, v...)
	}
	m = binary.BigEndian.AppendUint16(m, 0)
	binary.BigEndian.PutUint32(m[1:], uint32(len(m)-1))
	b.bind = m
	res := params.results
	if len(res) < 2 || len(res) != 2+2*int(binary.BigEndian.Uint16(res)) {
		return errBadBind
	}
	for i := 2; i < len(res); i += 2 {
		b.results = append(b.results, int16(binary.BigEndian.Uint16(res[i:])))
	}
	r.keyMoveBind = b
	return nil
}

// check accepts the messages of a key move's segment: its Bind, then its
// Execute (without a row limit) last, with Parse, Describe of the portal
// or Close around them.
func (b *keyMoveBind) check(frontend []byte) error {
	return checkBoundSegment(frontend, b.portal, false, pgerr.New(pgerr.FeatureNotSupported,
		"an UPDATE of a shard key column must be bound and executed (without a row limit) in one batch, without describing its statement there"))
}

// extendedMessages is an extended-protocol batch running sql (no
// parameters) with the client's result formats: Parse, Bind, Describe of
// the portal, Execute, Sync.
func extendedMessages(sql string, results []int16) []byte {
	m, _ := (&pgproto3.Parse{Query: sql}).Encode(nil)
	m, _ = (&pgproto3.Bind{ResultFormatCodes: results}).Encode(m)
	return describeExecuteSync(m)
}

// describeExecuteSync appends Describe and Execute of the unnamed portal,
// and Sync, to m.
func describeExecuteSync(m []byte) []byte {
	m, _ = (&pgproto3.Describe{ObjectType: 'P'}).Encode(m)
	m, _ = (&pgproto3.Execute{}).Encode(m)
	m, _ = (&pgproto3.Sync{}).Encode(m)
	return m
}

// routeKeyMove makes r run st, an UPDATE with a KeyMove plan, as a move.
// With one shard in the topology nothing moves: the UPDATE runs as
// written.
func (c *clientConn) routeKeyMove(r *routed, st *plannedStmt, params *bindParams) bool {
	if st.KeyMove == nil || c.onlyShard() != "" {
		return false
	}
	switch st.Route {
	case planner.Shard:
		shards, err := st.Shards(params.planner())
		if err != nil {
			r.err = err
			return true
		}
		r.shards = shards
	case planner.Scatter:
		r.shards, r.allShards = st.Targets, true
	default:
		r.err = pgerr.New(pgerr.InternalError, "planner: a shard-key UPDATE routed %s", st.Route)
		return true
	}
	r.mode, r.keyMove = routeKeyMove, st.KeyMove
	return true
}

// keyMoveCheck finds, on a shard holding the table, what the three steps
// would not do as an UPDATE does: triggers and rules (an UPDATE's would
// not fire, a DELETE's and INSERT's would), foreign keys referencing the
// table (whose ON DELETE actions would apply), row-level security
// (UPDATE's policies differ from DELETE's and INSERT's), generated
// columns (the INSERT cannot set them) and inheritance children (the
// INSERT would put their rows in the parent). Partitions are looked at
// with their partitioned table (pg_partition_tree lists nothing for a
// table that is not partitioned, hence the table itself too).
const keyMoveCheck = `WITH t AS (SELECT %[1]s::regclass::oid AS oid UNION SELECT relid FROM pg_catalog.pg_partition_tree(%[1]s::regclass))
SELECT concat_ws(', ',
  CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_trigger g JOIN t ON g.tgrelid = t.oid WHERE NOT g.tgisinternal) THEN 'triggers' END,
  CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_rewrite w JOIN t ON w.ev_class = t.oid WHERE w.rulename <> '_RETURN') THEN 'rules' END,
  CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_constraint k JOIN t ON k.confrelid = t.oid WHERE k.contype = 'f') THEN 'foreign keys referencing it' END,
  CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_class r JOIN t USING (oid) WHERE r.relrowsecurity) THEN 'row-level security' END,
  CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_attribute a JOIN t ON a.attrelid = t.oid WHERE a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> '') THEN 'generated columns' END,
  CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_class r JOIN t USING (oid) WHERE r.relkind = 'r' AND r.relhassubclass) THEN 'inheritance children' END)`

// keyMove runs an UPDATE that changes shard keys (routeKeyMove).
func (c *clientConn) keyMove(ctx context.Context, r *routed, frontend []byte) (bool, error) {
	km := r.keyMove
	ext := r.keyMoveBind
	if len(frontend) > 0 && frontend[0] != 'Q' {
		var err error = pgerr.New(pgerr.InternalError, "a shard-key UPDATE without its Bind")
		if ext != nil {
			err = ext.check(frontend)
		}
		if err != nil {
			c.out = appendError(c.out, "ERROR", err)
			c.failTx()
			return true, nil
		}
	} else {
		ext = nil
	}
	if n, lossy := c.settings.lossyFloatText(); lossy {
		c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.FeatureNotSupported,
			"UPDATE of shard key column with extra_float_digits %d is not supported: the router moves the rows as text", n))
		c.failTx()
		return true, nil
	}
	implicit := !c.tx.active
	if implicit {
		saved := c.settings
		c.tx = txState{active: true, begin: "BEGIN", settings: &saved, replica: c.settings.replica()}
	}
	// failWith ends a failed move: the error, and the router's own
	// transaction rolled back (a client's transaction fails, as it would
	// on one Postgres).
	failWith := func(msgs []byte) (bool, error) {
		if implicit {
			c.endImplicit(false)
		} else {
			c.failTx()
		}
		c.out = append(c.out, msgs...)
		return true, nil
	}
	fail := func(err error) (bool, error) { return failWith(appendError(nil, "ERROR", err)) }
	// step runs one statement on shard and returns its answer's messages,
	// or the messages to fail with.
	// The moved rows pass through the router's memory: bounded, as a
	// gather's, by tessera.gather_limit for each step's answer.
	limit := c.settings.gatherLimitBytes()
	step := func(shard string, fe []byte, prepared ...*pb.PreparedStatement) (*keyMoveAnswer, []byte) {
		answer, err := c.answerOf(ctx, shard, true, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: fe, Prepared: prepared}, limit)
		if err != nil {
			return nil, appendError(nil, "ERROR", shardError(shard, err))
		}
		a := &keyMoveAnswer{}
		var failure []byte
		backendMessages(answer, func(typ byte, msg []byte) error {
			switch typ {
			case 'T':
				a.desc = msg
			case 'D':
				a.rows = append(a.rows, msg)
			case 'C':
				_, a.count = splitTag(string(msg[5 : len(msg)-1]))
			case 'N':
				a.notices = append(a.notices, msg...)
			case 'E':
				failure = append(failure, msg...)
			}
			return nil
		})
		if failure != nil {
			return nil, append(a.notices, failure...)
		}
		return a, nil
	}

	// returning is how a statement giving the client's RETURNING rows
	// runs: as a Query, or bound with the client's result formats.
	returning := func(sql string) []byte {
		if ext != nil {
			return extendedMessages(sql, ext.results)
		}
		return queryMessage(sql)
	}
	table := quoteIdent(km.Table.Schema) + "." + quoteIdent(km.Table.Table)
	check, bad := step(r.shards[0], queryMessage(strings.ReplaceAll(keyMoveCheck, "%[1]s", pgwire.QuoteLiteral(table))))
	if bad != nil {
		return failWith(bad)
	}
	var vals [][]byte
	if len(check.rows) == 1 {
		vals = pgwire.DataRowValues(check.rows[0])
	}
	if len(vals) != 1 || len(vals[0]) > 0 {
		why := "its catalog could not be read"
		if len(vals) == 1 {
			why = "it has " + string(vals[0])
		}
		return fail(pgerr.New(pgerr.FeatureNotSupported,
			"UPDATE of shard key column of %s is not supported: %s, which a move between shards (DELETE and INSERT) would not treat as an UPDATE", table, why))
	}

	var notices []byte
	var values []string // the moved rows, as VALUES rows
	for _, shard := range r.shards {
		var up *keyMoveAnswer
		if ext != nil {
			up, bad = step(shard, describeExecuteSync(append([]byte(nil), ext.bind...)), ext.update)
		} else {
			up, bad = step(shard, queryMessage(km.Update))
		}
		if bad != nil {
			return failWith(bad)
		}
		notices = append(notices, up.notices...)
		if len(up.rows) == 0 {
			continue
		}
		names := pgwire.RowDescriptionNames(up.desc)
		if len(names) != len(km.Columns)+2 || strings.Join(names[2:], "\x00") != strings.Join(km.Columns, "\x00") {
			return fail(pgerr.New(pgerr.FeatureNotSupported,
				"UPDATE of shard key column of %s: its columns on shard %s (%s) are not those the router planned with (%s); try again",
				table, shard, strings.Join(names[min(2, len(names)):], ", "), strings.Join(km.Columns, ", ")))
		}
		// The new row versions, by the relation (partition) holding
		// them.
		var order []string
		ctids := map[string][]string{}
		for _, row := range up.rows {
			vals := pgwire.DataRowValues(row)
			if len(vals) != len(names) || vals[0] == nil || vals[1] == nil {
				return fail(pgerr.New(pgerr.InternalError, "shard %s returned a malformed row for a shard-key UPDATE", shard))
			}
			oid := string(vals[0])
			if _, err := strconv.ParseUint(oid, 10, 32); err != nil {
				return fail(pgerr.New(pgerr.InternalError, "shard %s returned tableoid %q", shard, oid))
			}
			if _, ok := ctids[oid]; !ok {
				order = append(order, oid)
			}
			ctids[oid] = append(ctids[oid], `"`+string(vals[1])+`"`)
			var b strings.Builder
			b.WriteByte('(')
			for i, v := range vals[2:] {
				if i > 0 {
					b.WriteString(", ")
				}
				if v == nil {
					b.WriteString("NULL")
				} else {
					// An untyped literal: the column's input function
					// reads back what its output function wrote.
					b.WriteString(pgwire.QuoteLiteral(string(v)))
				}
			}
			b.WriteByte(')')
			values = append(values, b.String())
		}
		var where []string
		for _, oid := range order {
			where = append(where, "(tableoid = "+oid+" AND ctid = ANY ("+pgwire.QuoteLiteral("{"+strings.Join(ctids[oid], ",")+"}")+"::pg_catalog.tid[]))")
		}
		del, bad := step(shard, queryMessage("DELETE FROM "+table+" WHERE "+strings.Join(where, " OR ")))
		if bad != nil {
			return failWith(bad)
		}
		if del.count != int64(len(up.rows)) {
			return fail(pgerr.New(pgerr.InternalError,
				"shard %s: deleting the %d row versions a shard-key UPDATE wrote deleted %d", shard, len(up.rows), del.count))
		}
	}

	var desc []byte
	var rows [][]byte
	if len(values) == 0 {
		if km.Returning {
			// No row moved: the client still gets its RETURNING's
			// description, from an INSERT of no rows.
			d, bad := step(r.shards[0], returning(km.Describe))
			if bad != nil {
				return failWith(bad)
			}
			desc = d.desc
		}
	} else {
		ins := km.InsertHead + strings.Join(values, ", ") + km.InsertTail
		stmts, _, err := c.plan(ins, nil)
		if err != nil {
			return fail(err)
		}
		if len(stmts) != 1 {
			return fail(pgerr.New(pgerr.InternalError, "the INSERT of a shard-key UPDATE planned as %d statements", len(stmts)))
		}
		ir := c.route(stmts[0], nil)
		if ir.err != nil {
			return fail(ir.err)
		}
		type part struct{ shard, sql string }
		var parts []part
		switch {
		case ir.mode == routeOne && len(ir.shards) == 1:
			parts = []part{{ir.shards[0], ins}}
		case ir.mode == routeSplit:
			for _, p := range ir.split.plan.Parts {
				parts = append(parts, part{p.Shard, p.SQL})
			}
		default:
			return fail(pgerr.New(pgerr.FeatureNotSupported, "UPDATE of shard key column of %s: the rows' INSERT would not route by row", table))
		}
		var inserted int64
		for _, p := range parts {
			a, bad := step(p.shard, returning(p.sql))
			if bad != nil {
				return failWith(bad)
			}
			notices = append(notices, a.notices...)
			if desc == nil {
				desc = a.desc
			}
			rows = append(rows, a.rows...)
			inserted += a.count
			if !implicit {
				c.tx.noteWrites([]string{p.shard})
			}
		}
		if inserted != int64(len(values)) {
			return fail(pgerr.New(pgerr.InternalError, "a shard-key UPDATE deleted %d rows and inserted %d", len(values), inserted))
		}
	}
	if implicit {
		if err := c.endImplicit(true); err != nil {
			c.out = appendError(c.out, "ERROR", err)
			return true, nil
		}
	}
	c.out = append(c.out, notices...)
	tag := "UPDATE " + strconv.Itoa(len(values))
	if ext == nil {
		if km.Returning {
			c.out = append(c.out, desc...)
			for _, row := range rows {
				c.out = append(c.out, row...)
			}
		}
		c.out = appendCommandComplete(c.out, tag)
		return false, nil
	}
	// The client's messages, answered in order.
	backendMessages(frontend, func(typ byte, _ []byte) error {
		switch typ {
		case 'P':
			c.out = appendMsg(c.out, '1')
		case 'B':
			c.out = appendMsg(c.out, '2')
		case 'D':
			if km.Returning {
				c.out = append(c.out, desc...)
			} else {
				c.out = appendMsg(c.out, 'n')
			}
		case 'E':
			for _, row := range rows {
				c.out = append(c.out, row...)
			}
			c.out = appendCommandComplete(c.out, tag)
		case 'C':
			c.out = appendMsg(c.out, '3')
		}
		return nil
	})
	return false, nil
}

// keyMoveAnswer is one step's answer.
type keyMoveAnswer struct {
	desc    []byte   // RowDescription
	rows    [][]byte // DataRows
	count   int64    // from CommandComplete
	notices []byte
}
