package router

import (
	"context"
	"encoding/binary"
	"strconv"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/tesseradb/tessera/pgerr"
)

// sequenceSelect answers a lone SELECT nextval('s'), currval('s') or
// lastval() of a sequence served from blocks.
func (c *clientConn) sequenceSelect(ctx context.Context, st *plannedStmt) (sequenceAction, error) {
	tree, err := pg_query.Parse(st.SQL)
	if err != nil || len(tree.Stmts) != 1 {
		return sequenceAction{}, nil
	}
	sel := tree.Stmts[0].Stmt.GetSelectStmt()
	if sel == nil || len(sel.TargetList) != 1 || len(sel.FromClause) > 0 || sel.WhereClause != nil || len(sel.GroupClause) > 0 ||
		sel.HavingClause != nil || len(sel.ValuesLists) > 0 || sel.Op != pg_query.SetOperation_SETOP_NONE || sel.WithClause != nil ||
		len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil || len(sel.DistinctClause) > 0 ||
		len(sel.LockingClause) > 0 || sel.IntoClause != nil || len(sel.WindowClause) > 0 {
		return sequenceAction{}, nil
	}
	rt := sel.TargetList[0].GetResTarget()
	fc := rt.GetVal().GetFuncCall()
	if fc == nil || fc.AggStar || fc.AggDistinct || fc.Over != nil || fc.AggFilter != nil || len(fc.AggOrder) > 0 {
		return sequenceAction{}, nil
	}
	fn := funcName(fc)
	column := rt.Name
	if column == "" {
		column = fn
	}
	cat, err := c.srv.sequences.catalog(ctx, c.database)
	if err != nil {
		return sequenceAction{}, err
	}
	var value int64
	switch {
	case fn == "lastval" && len(fc.Args) == 0:
		if c.seqs.lastSeq == 0 {
			return sequenceAction{}, nil // the shard's answer: it has seen every nextval
		}
		if c.seqs.shardCalls {
			return sequenceAction{}, pgerr.New(pgerr.FeatureNotSupported, "lastval() after sequence values both from the router and from the authoritative shard in this session is not supported")
		}
		value = c.seqs.last[c.seqs.lastSeq]
	case (fn == "nextval" || fn == "currval") && len(fc.Args) == 1:
		seq, ok := c.sequenceArg(cat, fc.Args[0])
		if !ok || !c.servedSequences(cat)[seq.oid] {
			return sequenceAction{}, nil
		}
		if fn == "nextval" {
			v, err := c.nextSequenceValues(ctx, seq, 1)
			if err != nil {
				return sequenceAction{}, err
			}
			value = v[0]
			break
		}
		v, ok := c.seqs.last[seq.oid]
		switch {
		case !ok && c.seqs.shardCalls:
			return sequenceAction{}, nil // the shard may have served it
		case !ok:
			return sequenceAction{}, pgerr.New("55000", "currval of sequence \"%s\" is not yet defined in this session", seq.name)
		case c.seqs.shardCalls:
			return sequenceAction{}, pgerr.New(pgerr.FeatureNotSupported, "currval() of a sequence whose values came both from the router and from the authoritative shard in this session is not supported")
		}
		value = v
	default:
		return sequenceAction{}, nil
	}
	c.out = appendInt8RowDescription(c.out, column)
	c.out = appendDataRow(c.out, strconv.FormatInt(value, 10))
	c.out = appendCommandComplete(c.out, "SELECT 1")
	return sequenceAction{answered: true}, nil
}

// appendInt8RowDescription describes one bigint column in text, as
// nextval's answer.
func appendInt8RowDescription(dst []byte, name string) []byte {
	body := binary.BigEndian.AppendUint16(nil, 1)
	body = append(body, name...)
	body = append(body, 0)
	body = binary.BigEndian.AppendUint32(body, 0)  // table oid
	body = binary.BigEndian.AppendUint16(body, 0)  // column
	body = binary.BigEndian.AppendUint32(body, 20) // int8
	body = binary.BigEndian.AppendUint16(body, 8)
	body = binary.BigEndian.AppendUint32(body, 0xffffffff)
	body = binary.BigEndian.AppendUint16(body, 0) // text format
	return appendMsg(dst, 'T', body)
}
