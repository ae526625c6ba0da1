package router

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"
	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router/planner"
)

// The router fills in, from its blocks (sequence.go), what the shards
// would otherwise take from their own copies of a sequence: in an INSERT
// into a table beyond the authoritative shard, each column fed by a
// sequence that the statement leaves to its default (omitted, DEFAULT,
// DEFAULT VALUES, or an identity column under OVERRIDING USER VALUE) and
// each VALUES item that is exactly nextval('s'), one value per row, in
// row order. The statement then has its values as literals and is
// planned again: routed, or split, by them; RETURNING shows them. A lone
// SELECT nextval('s'), currval('s') or lastval() of a sequence that feeds
// such a table is answered by the router from the same blocks.
//
// Simple-protocol Queries are rewritten (a string of several statements
// is made again of its statements, each INSERT filled in); an INSERT ...
// SELECT that leaves a fed column to its default is refused with 0A000,
// rather than let each shard hand out its own copy's values. In the
// extended protocol the INSERT is rewritten at Parse with a parameter
// for each value after the client's (extendedFill), and each Bind gets
// the values added (fillBind); the shards describe the client's own text,
// so the ParameterDescription a client sees counts only its parameters.

// sequenceAction is what serveSequences decided for a statement.
type sequenceAction struct {
	// sql, when set, is the statement with the values filled in.
	sql string
	// answered: the router answered the statement itself (into c.out).
	answered bool
	// failed: its answer is an error (a string of statements stops).
	failed bool
	// params: for the extended protocol, the sequences whose values
	// sql takes as parameters after the client's, in their order.
	params []sequenceRef
}

// beyondAuthoritative reports whether a table of the session's database
// lives beyond the authoritative shard (sharded, reference, or in a
// group on another shard): its sequence values come from the router.
func (c *clientConn) beyondAuthoritative(schema, table string) bool {
	snap := c.srv.topo.Current()
	if snap == nil {
		return false
	}
	top := snap.Topology
	p := top.Resolve(c.database, schema, table)
	if p == nil {
		return false
	}
	if p.Group != nil && len(p.Group.KeyRanges) == 1 && p.Group.KeyRanges[0].ShardUID == top.AuthoritativeShard() {
		return false
	}
	return true
}

// servedSequences returns the sequences that feed tables beyond the
// authoritative shard.
func (c *clientConn) servedSequences(cat *sequenceCatalog) map[uint32]bool {
	out := map[uint32]bool{}
	for key, cols := range cat.fed {
		schema, table, _ := strings.Cut(key, ".")
		if c.beyondAuthoritative(schema, table) {
			for _, f := range cols {
				out[f.seq.oid] = true
			}
		}
	}
	return out
}

// mentionsSequences is a cheap test before parsing: the text names a
// sequence function.
func mentionsSequences(sql string) bool {
	l := strings.ToLower(sql)
	return strings.Contains(l, "nextval") || strings.Contains(l, "currval") || strings.Contains(l, "lastval")
}

// serveSequences serves st's sequence values when the router must: an
// INSERT filled in, or a lone SELECT of a sequence function answered.
func (c *clientConn) serveSequences(ctx context.Context, st *plannedStmt) (sequenceAction, error) {
	switch {
	case st == nil || c.tx.failed || c.settings.replica():
		// A failed transaction answers 25P02 to everything, and a
		// replica 25006 to nextval and writes: the ordinary path says
		// so.
		return sequenceAction{}, nil
	case c.readOnlyTx():
		// Postgres refuses the INSERT, or nextval, before any value is
		// taken; so do the shards, once the router leaves them the
		// statement as written.
		return sequenceAction{}, nil
	case st.Kind == planner.Insert && len(st.Tables) > 0:
		t := st.Tables[0]
		if t.Database != c.database || !c.beyondAuthoritative(t.Schema, t.Table) {
			return sequenceAction{}, nil
		}
		cat, err := c.srv.sequences.catalog(ctx, c.database)
		if err != nil {
			return sequenceAction{}, err
		}
		fed := cat.fed[t.Schema+"."+t.Table]
		if len(fed) == 0 && !mentionsSequences(st.SQL) {
			return sequenceAction{}, nil
		}
		return c.fillInsert(ctx, st, cat, fed, 0)
	case st.Kind == planner.Select && len(st.Tables) == 0 && mentionsSequences(st.SQL):
		return c.sequenceSelect(ctx, st)
	case st.Kind == planner.Update && len(st.Tables) > 0:
		return sequenceAction{}, c.checkUpdateDefault(ctx, st)
	case len(st.Tables) > 0 && st.Kind != planner.Select && st.Kind != planner.Update && st.Kind != planner.Delete &&
		strings.Contains(strings.ToLower(st.SQL), "restart"):
		return sequenceAction{}, c.checkTruncateRestart(ctx, st)
	}
	return sequenceAction{}, nil
}

// checkTruncateRestart refuses TRUNCATE ... RESTART IDENTITY of a table
// whose sequences the router serves: it would restart the copies on the
// table's shards, not the authoritative shard's, which hands out the
// values.
func (c *clientConn) checkTruncateRestart(ctx context.Context, st *plannedStmt) error {
	tree, err := pg_query.Parse(st.SQL)
	if err != nil || len(tree.Stmts) != 1 {
		return nil
	}
	tr := tree.Stmts[0].Stmt.GetTruncateStmt()
	if tr == nil || !tr.RestartSeqs {
		return nil
	}
	cat, err := c.srv.sequences.catalog(ctx, c.database)
	if err != nil {
		return err
	}
	for _, t := range st.Tables {
		if t.Database == c.database && c.beyondAuthoritative(t.Schema, t.Table) && len(cat.fed[t.Schema+"."+t.Table]) > 0 {
			return pgerr.New(pgerr.FeatureNotSupported,
				"TRUNCATE ... RESTART IDENTITY of %s.%s is not supported: its sequences are served from the authoritative shard; use ALTER SEQUENCE ... RESTART", t.Schema, t.Table)
		}
	}
	return nil
}

// fillInsert rewrites an INSERT into a table beyond the authoritative
// shard whose fed columns it leaves to their defaults.
//
// asParams > 0 (the extended protocol) fills each item with a parameter
// numbered from asParams on instead of a value, the values to be bound
// with each Bind (fillBind); the action's params say their sequences.
func (c *clientConn) fillInsert(ctx context.Context, st *plannedStmt, cat *sequenceCatalog, fed []fedColumn, asParams int) (sequenceAction, error) {
	tree, err := pg_query.Parse(st.SQL)
	if err != nil || len(tree.Stmts) != 1 {
		return sequenceAction{}, nil // the planner's own answer stands
	}
	ins := tree.Stmts[0].Stmt.GetInsertStmt()
	if ins == nil {
		return sequenceAction{}, nil
	}
	name := st.Tables[0].Schema + "." + st.Tables[0].Table
	refuse := func(why string) (sequenceAction, error) {
		return sequenceAction{}, pgerr.New(pgerr.FeatureNotSupported,
			"INSERT into %s %s is not supported: its sequence values come from the authoritative shard, which the router fills in only in INSERT ... VALUES", name, why)
	}
	sel := ins.SelectStmt.GetSelectStmt()
	defaultValues := ins.SelectStmt == nil
	var cols []string
	for _, n := range ins.Cols {
		if n.GetResTarget().GetIndirection() != nil {
			return sequenceAction{}, nil
		}
		cols = append(cols, n.GetResTarget().GetName())
	}
	if !defaultValues && (sel == nil || len(sel.ValuesLists) == 0) {
		// INSERT ... SELECT: a fed column it does not set would take a
		// shard's value.
		for _, f := range fed {
			if len(cols) == 0 || indexOf(cols, f.column) < 0 {
				return refuse("from a SELECT, leaving column " + f.column + " to its sequence")
			}
		}
		return sequenceAction{}, nil
	}
	var rows [][]*pg_query.Node
	if !defaultValues {
		for _, l := range sel.ValuesLists {
			rows = append(rows, l.GetList().GetItems())
		}
		if len(cols) == 0 {
			names, err := c.srv.schema.ColumnNames(c.database, st.Tables[0].Schema, st.Tables[0].Table)
			if err != nil {
				return sequenceAction{}, err
			}
			width := len(rows[0])
			if width > len(names) {
				return sequenceAction{}, nil // Postgres's error (42601)
			}
			cols = names[:width]
		}
	} else {
		rows = [][]*pg_query.Node{nil}
	}

	// What to fill: (row, column position) items, each from a sequence.
	type slot struct {
		row, col int
		seq      sequenceRef
	}
	var slots []slot
	appended := map[string]int{}
	overrideUser := ins.Override == pg_query.OverridingKind_OVERRIDING_USER_VALUE
	needsSystem := false
	for _, f := range fed {
		pos := indexOf(cols, f.column)
		if pos < 0 {
			pos = len(cols)
			cols = append(cols, f.column)
			appended[f.column] = pos
		}
		for r := range rows {
			var item *pg_query.Node
			if pos < len(rows[r]) {
				item = rows[r][pos]
			}
			switch {
			case item == nil || item.GetSetToDefault() != nil || f.identity && overrideUser:
				slots = append(slots, slot{row: r, col: pos, seq: f.seq})
				needsSystem = needsSystem || f.always || overrideUser
			case f.always && ins.Override != pg_query.OverridingKind_OVERRIDING_SYSTEM_VALUE:
				// Postgres refuses a value for a GENERATED ALWAYS column
				// (428C9): let the shard say so.
				return sequenceAction{}, nil
			}
		}
	}
	// Explicit nextval('s') items, in any column.
	for r := range rows {
		for p, item := range rows[r] {
			seq, ok := c.nextvalOf(cat, item)
			if !ok {
				continue
			}
			dup := false
			for _, s := range slots {
				dup = dup || s.row == r && s.col == p
			}
			if !dup {
				slots = append(slots, slot{row: r, col: p, seq: seq})
			}
		}
	}
	if len(slots) == 0 {
		return sequenceAction{}, nil
	}
	// Values in Postgres's order of evaluation: row by row, column by
	// column.
	sortSlots := func(a, b slot) bool { return a.row < b.row || a.row == b.row && a.col < b.col }
	for i := 1; i < len(slots); i++ {
		for j := i; j > 0 && sortSlots(slots[j], slots[j-1]); j-- {
			slots[j], slots[j-1] = slots[j-1], slots[j]
		}
	}
	var action sequenceAction
	if asParams > 0 {
		for i, s := range slots {
			for len(rows[s.row]) <= s.col {
				rows[s.row] = append(rows[s.row], &pg_query.Node{Node: &pg_query.Node_SetToDefault{SetToDefault: &pg_query.SetToDefault{}}})
			}
			rows[s.row][s.col] = &pg_query.Node{Node: &pg_query.Node_ParamRef{ParamRef: &pg_query.ParamRef{Number: int32(asParams + i)}}}
			action.params = append(action.params, s.seq)
		}
		slots = nil
	}
	seqs := make([]sequenceRef, len(slots))
	for i, s := range slots {
		seqs[i] = s.seq
	}
	values, err := c.fillValues(ctx, seqs)
	if err != nil {
		return sequenceAction{}, err
	}
	for i, s := range slots {
		v := values[i]
		for len(rows[s.row]) <= s.col {
			rows[s.row] = append(rows[s.row], &pg_query.Node{Node: &pg_query.Node_SetToDefault{SetToDefault: &pg_query.SetToDefault{}}})
		}
		rows[s.row][s.col] = intConst(v)
	}
	// Rebuild: the column list in full, the rows as filled.
	ins.Cols = ins.Cols[:0]
	for _, col := range cols {
		ins.Cols = append(ins.Cols, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Name: col}}})
	}
	if defaultValues {
		ins.SelectStmt = &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
			ValuesLists: []*pg_query.Node{{Node: &pg_query.Node_List{List: &pg_query.List{}}}},
			Op:          pg_query.SetOperation_SETOP_NONE,
		}}}
		sel = ins.SelectStmt.GetSelectStmt()
	}
	for r := range rows {
		// A row shorter than the columns takes DEFAULT for the rest.
		for len(rows[r]) < len(cols) {
			rows[r] = append(rows[r], &pg_query.Node{Node: &pg_query.Node_SetToDefault{SetToDefault: &pg_query.SetToDefault{}}})
		}
		sel.ValuesLists[r].GetList().Items = rows[r]
	}
	if needsSystem {
		ins.Override = pg_query.OverridingKind_OVERRIDING_SYSTEM_VALUE
	}
	action.sql, err = pg_query.Deparse(tree)
	if err != nil {
		return sequenceAction{}, pgerr.New(pgerr.InternalError, "writing the INSERT with its sequence values: %v", err)
	}
	return action, nil
}

// nextvalOf recognizes nextval('name') (or 'name'::regclass) of a
// sequence of cat.
func (c *clientConn) nextvalOf(cat *sequenceCatalog, n *pg_query.Node) (sequenceRef, bool) {
	fc := n.GetFuncCall()
	if fc == nil || funcName(fc) != "nextval" || len(fc.Args) != 1 || fc.AggStar || fc.AggDistinct || fc.Over != nil {
		return sequenceRef{}, false
	}
	return c.sequenceArg(cat, fc.Args[0])
}

// funcName is a call's function name, if unqualified or in pg_catalog.
func funcName(fc *pg_query.FuncCall) string {
	names := fc.Funcname
	switch {
	case len(names) == 1:
	case len(names) == 2 && names[0].GetString_().GetSval() == "pg_catalog":
	default:
		return ""
	}
	return names[len(names)-1].GetString_().GetSval()
}

// sequenceArg resolves a sequence function's argument, a string constant
// (optionally cast to regclass), against the session's search path.
func (c *clientConn) sequenceArg(cat *sequenceCatalog, arg *pg_query.Node) (sequenceRef, bool) {
	if tc := arg.GetTypeCast(); tc != nil {
		names := tc.TypeName.GetNames()
		if len(names) == 0 || names[len(names)-1].GetString_().GetSval() != "regclass" || len(tc.TypeName.Typmods) > 0 {
			return sequenceRef{}, false
		}
		arg = tc.Arg
	}
	k := arg.GetAConst()
	if k == nil || k.GetSval() == nil {
		return sequenceRef{}, false
	}
	parts, ok := qualifiedName(k.GetSval().Sval)
	if !ok {
		return sequenceRef{}, false
	}
	switch len(parts) {
	case 2:
		seq, ok := cat.byName[parts[0]+"."+parts[1]]
		return seq, ok
	case 1:
		snap := c.srv.topo.Current()
		if snap == nil {
			return sequenceRef{}, false
		}
		for _, schema := range c.searchPath(snap.Revision) {
			if seq, ok := cat.byName[schema+"."+parts[0]]; ok {
				return seq, true
			}
		}
	}
	return sequenceRef{}, false
}

// qualifiedName splits a regclass text as Postgres does: dots between
// names, unquoted names folded to lower case, "" inside quotes.
func qualifiedName(s string) ([]string, bool) {
	var parts []string
	for {
		s = strings.TrimSpace(s)
		var part string
		if strings.HasPrefix(s, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(s); i++ {
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						b.WriteByte('"')
						i++
						continue
					}
					break
				}
				b.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, false
			}
			part, s = b.String(), s[i+1:]
		} else {
			end := strings.IndexByte(s, '.')
			if end < 0 {
				end = len(s)
			}
			part, s = strings.ToLower(strings.TrimSpace(s[:end])), s[end:]
		}
		if part == "" {
			return nil, false
		}
		parts = append(parts, part)
		s = strings.TrimSpace(s)
		if s == "" {
			break
		}
		if s[0] != '.' {
			return nil, false
		}
		s = s[1:]
	}
	if len(parts) > 2 {
		return nil, false // a database name, or worse
	}
	return parts, true
}

// intConst is v as an SQL constant.
func intConst(v int64) *pg_query.Node {
	if v >= -1<<31 && v < 1<<31 {
		return pg_query.MakeAConstIntNode(v, -1)
	}
	return &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{
		Val: &pg_query.A_Const_Fval{Fval: &pg_query.Float{Fval: strconv.FormatInt(v, 10)}}, Location: -1}}}
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// sequencesOf serves the sequence values of a simple-protocol Query's
// statements: a lone statement may be filled in or answered; in a string
// of several, each INSERT is filled in, and the string is made again of
// the statements' texts.
func (c *clientConn) sequencesOf(ctx context.Context, stmts []*plannedStmt) (sequenceAction, error) {
	if len(stmts) == 1 {
		return c.serveSequences(ctx, stmts[0])
	}
	texts := make([]string, len(stmts))
	changed := false
	for i, st := range stmts {
		if st == nil {
			continue
		}
		texts[i] = st.SQL
		if st.Kind == planner.Select || c.takesInsertSelect(st) {
			// A SELECT is answered by the router only alone; an INSERT
			// ... SELECT the router runs is filled in once its rows are
			// VALUES (runQuery).
			continue
		}
		act, err := c.serveSequences(ctx, st)
		if err != nil {
			return sequenceAction{}, err
		}
		if act.sql != "" {
			texts[i], changed = act.sql, true
		}
	}
	if !changed {
		return sequenceAction{}, nil
	}
	return sequenceAction{sql: strings.Join(texts, ";\n")}, nil
}

// readOnlyTx reports a transaction the client made read-only, where
// nextval fails (25006): BEGIN READ ONLY, or default_transaction_read_only.
func (c *clientConn) readOnlyTx() bool {
	if v, ok := c.settings.get("default_transaction_read_only"); ok {
		switch strings.ToLower(strings.Trim(v, `'" `)) {
		case "on", "true", "yes", "1":
			return true
		}
	}
	return c.tx.active && strings.Contains(strings.ToLower(c.tx.begin), "read only")
}

// checkUpdateDefault refuses UPDATE ... SET c = DEFAULT of a column fed
// by a sequence the router serves: each shard would take its own copy's
// value, which other shards also hand out. (Filling it in is planned.)
func (c *clientConn) checkUpdateDefault(ctx context.Context, st *plannedStmt) error {
	t := st.Tables[0]
	if !strings.Contains(strings.ToLower(st.SQL), "default") || t.Database != c.database || !c.beyondAuthoritative(t.Schema, t.Table) {
		return nil
	}
	cat, err := c.srv.sequences.catalog(ctx, c.database)
	if err != nil {
		return err
	}
	fed := cat.fed[t.Schema+"."+t.Table]
	if len(fed) == 0 {
		return nil
	}
	tree, err := pg_query.Parse(st.SQL)
	if err != nil || len(tree.Stmts) != 1 {
		return nil // the planner's own answer stands
	}
	up := tree.Stmts[0].Stmt.GetUpdateStmt()
	for _, n := range up.GetTargetList() {
		rt := n.GetResTarget()
		if rt.GetVal().GetSetToDefault() == nil {
			continue
		}
		for _, f := range fed {
			if f.column == rt.GetName() {
				return pgerr.New(pgerr.FeatureNotSupported,
					"UPDATE of %s.%s setting column %s to its sequence (DEFAULT) is not supported yet: its values come from the authoritative shard", t.Schema, t.Table, f.column)
			}
		}
	}
	return nil
}

// extendedFill plans, at Parse, how an INSERT the simple protocol would
// fill sequence values into (serveSequences) gets them through the
// extended protocol: each item becomes a parameter after the client's,
// bound with each Bind (fillBind). It returns nil when nothing is to be
// filled, and refuses an UPDATE setting a fed column to DEFAULT.
func (c *clientConn) extendedFill(ctx context.Context, p *prepared) (*prepared, error) {
	st := p.stmt
	// The planner's refusal of an INSERT leaving its shard key to a
	// sequence is what filling answers: st.Err does not stop it.
	if st == nil || len(st.Tables) == 0 || c.settings.replica() || c.readOnlyTx() {
		return nil, nil
	}
	if st.Kind == planner.Update {
		if st.Err != nil {
			return nil, nil
		}
		return nil, c.checkUpdateDefault(ctx, st)
	}
	if st.Kind != planner.Insert || c.takesInsertSelect(st) {
		// An INSERT ... SELECT the router runs is filled in once its
		// rows are VALUES (insertselect_ext.go).
		return nil, nil
	}
	t := st.Tables[0]
	if t.Database != c.database || !c.beyondAuthoritative(t.Schema, t.Table) {
		return nil, nil
	}
	cat, err := c.srv.sequences.catalog(ctx, c.database)
	if err != nil {
		return nil, err
	}
	fed := cat.fed[t.Schema+"."+t.Table]
	if len(fed) == 0 && !mentionsSequences(st.SQL) {
		return nil, nil
	}
	n := clientParams(st.SQL, p.oids)
	action, err := c.fillInsert(ctx, st, cat, fed, n+1)
	if err != nil || len(action.params) == 0 {
		return nil, err
	}
	oids := make([]uint32, n, n+len(action.params))
	copy(oids, p.oids)
	for range action.params {
		oids = append(oids, pgtype.Int8OID)
	}
	stmts, revision, replica, err := c.planView(action.sql, oids)
	if err != nil {
		return nil, err
	}
	if len(stmts) != 1 {
		return nil, pgerr.New(pgerr.InternalError, "the INSERT with its sequence parameters planned as %d statements", len(stmts))
	}
	fill := &prepared{sql: action.sql, oids: oids, stmt: stmts[0], revision: revision, replica: replica, epoch: p.epoch,
		fillSeqs: action.params, clientParams: n}
	fill.proto = fill.contentProto()
	return fill, nil
}

// clientParams is how many parameters the client's statement has: the
// highest $n it uses, or more if the Parse declared more types.
func clientParams(sql string, oids []uint32) int {
	return max(len(oids), planner.HighestParam(sql))
}

// fillBind makes the Bind of fill from the client's Bind of the statement
// fill was made of (its bytes after the statement name): the client's
// parameters, then a value of each filled sequence, in text. Values are
// taken at Bind, as Postgres takes them when the INSERT runs; like
// nextval's, they are not given back if the statement fails.
func (c *clientConn) fillBind(ctx context.Context, fill *prepared, stmtName, portal string, rest []byte) ([]byte, error) {
	n := fill.clientParams
	bad := func(format string, args ...any) ([]byte, error) {
		return nil, pgerr.New(pgerr.ProtocolViolation, format, args...)
	}
	if len(rest) < 2 {
		return bad("invalid Bind message")
	}
	nf := int(binary.BigEndian.Uint16(rest))
	if len(rest) < 2+2*nf+2 {
		return bad("invalid Bind message")
	}
	formats := rest[2 : 2+2*nf]
	off := 2 + 2*nf
	np := int(binary.BigEndian.Uint16(rest[off:]))
	if np != n {
		return bad("bind message supplies %d parameters, but prepared statement \"%s\" requires %d", np, stmtName, n)
	}
	if nf > 1 && nf != np {
		return bad("bind message has %d parameter formats but %d parameters", nf, np)
	}
	valuesAt := off + 2
	off = valuesAt
	for i := 0; i < np; i++ {
		if len(rest) < off+4 {
			return bad("invalid Bind message")
		}
		l := int(int32(binary.BigEndian.Uint32(rest[off:])))
		off += 4
		if l > 0 {
			off += l
		}
		if off > len(rest) {
			return bad("invalid Bind message")
		}
	}
	values, err := c.fillValues(ctx, fill.fillSeqs)
	if err != nil {
		return nil, err
	}
	k := len(values)
	out := make([]byte, 0, len(rest)+2*(n+k)+k*24+len(portal)+len(fill.proto.Name)+8)
	out = append(out, 'B', 0, 0, 0, 0)
	out = append(out, portal...)
	out = append(out, 0)
	out = append(out, fill.proto.Name...)
	out = append(out, 0)
	switch {
	case nf == 0 || nf == 1 && binary.BigEndian.Uint16(formats) == 0:
		// All text, the added values too.
		out = append(out, rest[:2+2*nf]...)
	default:
		// One code per parameter: the client's, then text for the added.
		out = binary.BigEndian.AppendUint16(out, uint16(n+k))
		for i := 0; i < n; i++ {
			if nf == 1 {
				out = append(out, formats[0:2]...)
			} else {
				out = append(out, formats[2*i:2*i+2]...)
			}
		}
		for range k {
			out = append(out, 0, 0)
		}
	}
	out = binary.BigEndian.AppendUint16(out, uint16(n+k))
	out = append(out, rest[valuesAt:off]...)
	for _, v := range values {
		text := strconv.AppendInt(nil, v, 10)
		out = binary.BigEndian.AppendUint32(out, uint32(len(text)))
		out = append(out, text...)
	}
	out = append(out, rest[off:]...) // the result formats
	binary.BigEndian.PutUint32(out[1:], uint32(len(out)-1))
	return out, nil
}

// fillValues takes one value of each sequence of seqs, in order, and
// records them for currval and lastval. Values come one at a time (from
// the router's block, rarely from the authoritative shard) so that an
// error (2200H past a sequence's end) leaves the values before it taken
// and none after, as Postgres's row-by-row evaluation does.
func (c *clientConn) fillValues(ctx context.Context, seqs []sequenceRef) ([]int64, error) {
	out := make([]int64, 0, len(seqs))
	for _, s := range seqs {
		v, err := c.nextSequenceValues(ctx, s, 1)
		if err != nil {
			return nil, err
		}
		out = append(out, v[0])
	}
	return out, nil
}
