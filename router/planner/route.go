package planner

import (
	"errors"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// Params gives the parameter values of a Bind message: the format code and
// raw bytes of 1-based parameter n, value nil for SQL NULL; ok is false when
// the Bind has no parameter n.
type Params func(n int) (format shardfunc.Format, value []byte, ok bool)

// Shards returns the shards the statement runs on, or the error it fails
// with. For a Shard route it routes every key: a literal by its text (as
// the column type's text input would read it), a parameter by the Bind's
// format and bytes; params may be nil for the simple protocol. Keys that are
// NULL match no row and are skipped (a statement whose keys are all NULL
// still needs an answer, so it goes to the group's first shard); an INSERT
// with a NULL shard key is refused. The result is in the group's key order
// and must not be modified. Routing a single integer key does not allocate.
func (s *Statement) Shards(params Params) ([]string, error) {
	if s.Err != nil {
		return nil, s.Err
	}
	if s.Route != Shard {
		return s.Targets, nil
	}
	var seen uint64 // bit i: Targets[i] is reached
	var many []bool // instead of seen for groups of more than 64 shards
	if len(s.Targets) > 64 {
		many = make([]bool, len(s.Targets))
	}
	distinct, first := 0, 0
	err := s.eachKey(params, func(_ *Key, shard string) {
		at := indexOf(s.Targets, shard)
		if many != nil {
			if many[at] {
				return
			}
			many[at] = true
		} else {
			if seen&(1<<at) != 0 {
				return
			}
			seen |= 1 << at
		}
		if distinct++; distinct == 1 {
			first = at
		}
	})
	if err == errUnroutable {
		return s.everyShard()
	}
	if err != nil {
		return nil, err
	}
	if distinct <= 1 {
		return s.Targets[first : first+1], nil
	}
	if s.multiShard != nil {
		return nil, s.multiShard
	}
	out := make([]string, 0, distinct)
	for i, t := range s.Targets {
		if many != nil && many[i] || many == nil && seen&(1<<i) != 0 {
			out = append(out, t)
		}
	}
	return out, nil
}

// eachKey routes each placement key of a Shard route and calls fn with
// it and its shard, after checking the alternate-index keys that follow
// it against it. NULL keys are skipped, except in an INSERT, which
// cannot route a row without its key (23502).
func (s *Statement) eachKey(params Params, fn func(k *Key, shard string)) error {
	var rowKey uint64
	for i := range s.Keys {
		k := &s.Keys[i]
		key, null, err := k.route(params)
		if err != nil {
			if !k.readsBySettings(err) {
				return err
			}
			if s.PerRow || k.Check {
				// A row must be placed by its key.
				return unsupported("shard-key value %q of column %s cannot be routed (%v)", k.display(params), k.Column, err)
			}
			return errUnroutable
		}
		switch {
		case k.Check:
			if !null {
				if err := s.Placement.CheckAlternateKey(rowKey, k.Index, key); err != nil {
					return err
				}
			}
			continue
		case null && s.PerRow:
			return &pgerr.Error{Code: notNullViolationCode,
				Message: "null value in shard key column \"" + k.Column + "\" cannot be routed"}
		case null:
			continue
		}
		rowKey = key
		fn(k, s.Placement.Group.ShardFor(key))
	}
	return nil
}

// errUnroutable: a key's value could not be routed (a date not in ISO
// 8601, a timestamptz without a UTC offset, which Postgres reads by the
// session's DateStyle and TimeZone; or a value Postgres refuses too).
var errUnroutable = errors.New("planner: a shard-key value cannot be routed")

// everyShard is where a statement goes when a key's value cannot be
// routed: every shard of the group, each of which reads the value as
// Postgres does (with the session's settings) and answers for its own
// rows, or fails as Postgres would. A statement whose answers would then
// need combining, or whose tables are restricted by separate keys, is
// refused instead.
func (s *Statement) everyShard() ([]string, error) {
	if s.multiShard != nil {
		return nil, s.multiShard
	}
	for i := range s.Keys {
		if s.Keys[i].Separate {
			return nil, unsupported("a join not on the shard key across shards is not supported yet (a shard-key value of the statement cannot be routed: write dates and times in ISO 8601 with a UTC offset)")
		}
	}
	return s.Targets, nil
}

// readsBySettings reports an error routing a date or time the router
// reads in ISO 8601 only (with a UTC offset for timestamptz), where
// Postgres reads other forms too, by the session's DateStyle and
// TimeZone.
func (k *Key) readsBySettings(err error) bool {
	switch k.Type {
	case shardfunc.Date, shardfunc.Timestamp, shardfunc.Timestamptz:
		code := pgerr.Code(err)
		return code == "22007" || code == "22008"
	}
	return false
}

// display is the key's value for a message.
func (k *Key) display(params Params) string {
	if k.Param > 0 && params != nil {
		if _, v, ok := params(k.Param); ok {
			return string(v)
		}
	}
	return k.Literal
}

// route computes the routing key of k's value; null reports SQL NULL.
func (k *Key) route(params Params) (key uint64, null bool, err error) {
	var buf [64]byte
	raw, format := k.AppendValue(buf[:0]), shardfunc.TextFormat
	if k.Param > 0 {
		if params == nil {
			return 0, false, pgerr.New(undefinedParameter, "there is no parameter $%d", k.Param)
		}
		f, v, ok := params(k.Param)
		if !ok {
			return 0, false, pgerr.New(pgerr.ProtocolViolation, "bind message has no value for parameter $%d", k.Param)
		}
		if v == nil {
			return 0, true, nil
		}
		raw, format = v, f
	}
	key, err = k.Index.Func.Key(k.Type, format, raw)
	if err != nil && k.widens && pgerr.Code(err) == "22003" {
		return 0, true, nil // out of the column's range: no row has it
	}
	return key, false, err
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	// ShardFor only returns shards of the group, which Targets lists.
	panic("planner: shard " + s + " is not in its group")
}
