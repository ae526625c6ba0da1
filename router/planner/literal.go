package planner

import "sort"

// A cached plan is reused for every statement of the same shape, so each
// literal the plan routes by must be found again, by position, in the new
// text. That is only sound if the scanner's literal tokens are exactly the
// constants Postgres's parser made: this file matches them with pg_query's
// A_Const locations and decodes literal values.

// litRef locates the literal token behind an A_Const.
type litRef struct {
	index   int  // in the input's literal tokens
	negated bool // Postgres folded an odd number of unary minus signs into it
}

// literalAt returns the literal token behind an A_Const at byte offset loc.
// Postgres folds a unary minus into a numeric constant and gives it the
// location of the (outermost) minus sign, so loc may point at a run of minus
// signs and whitespace before the token.
func literalAt(sql string, lits []span, loc int) (litRef, bool) {
	if loc < 0 || loc >= len(sql) {
		return litRef{}, false
	}
	minus := 0
	j := loc
	for j < len(sql) && (sql[j] == '-' || isSpace(sql[j])) {
		if sql[j] == '-' {
			if j+1 < len(sql) && sql[j+1] == '-' {
				return litRef{}, false // a comment, not two minus signs
			}
			minus++
		}
		j++
	}
	i := sort.Search(len(lits), func(i int) bool { return lits[i].start >= j })
	if i == len(lits) || lits[i].start != j {
		return litRef{}, false
	}
	if minus > 0 && lits[i].class != IntegerLiteral && lits[i].class != NumericLiteral {
		return litRef{}, false
	}
	return litRef{index: i, negated: minus%2 == 1}, true
}

// lookupConst maps an A_Const location to its literal for key extraction.
func (c *planCtx) lookupConst(loc int32) (litRef, bool) {
	return literalAt(c.sql, c.lits, int(loc))
}

// literalsMatch reports whether every literal token of the input is the
// source of at least one of the A_Consts at locs. A token no constant came
// from (the gid of PREPARE TRANSACTION, a COMMENT string, a function body,
// the second of two strings Postgres concatenated across a line break) may
// shape the plan in ways the cache cannot see.
func literalsMatch(sql string, lits []span, locs []int32) bool {
	matched := make([]bool, len(lits))
	for _, loc := range locs {
		if r, ok := literalAt(sql, lits, int(loc)); ok {
			matched[r.index] = true
		}
	}
	for _, m := range matched {
		if !m {
			return false
		}
	}
	return true
}

// AppendValue appends the key's value in Postgres text format: the digits
// of a number (with its folded minus sign), the contents of a string
// without quotes and with doubled quotes undone. It returns dst unchanged
// for a parameter.
func (k *Key) AppendValue(dst []byte) []byte {
	return appendLiteralValue(dst, k.Class, k.Literal, k.Negated)
}

// appendLiteralValue appends the value of the literal token lit in
// Postgres text format (see Key.AppendValue).
func appendLiteralValue(dst []byte, class LiteralClass, lit string, negated bool) []byte {
	switch class {
	case IntegerLiteral, NumericLiteral:
		if negated {
			dst = append(dst, '-')
		}
		return append(dst, lit...)
	case StringLiteral:
		if len(lit) < 2 {
			return dst
		}
		body := lit[1 : len(lit)-1]
		for i := 0; i < len(body); i++ {
			dst = append(dst, body[i])
			if body[i] == '\'' {
				i++ // the second quote of a doubled pair
			}
		}
		return dst
	case DollarStringLiteral:
		// $tag$body$tag$: the delimiter is everything up to the second $.
		d := 1
		for d < len(lit) && lit[d] != '$' {
			d++
		}
		if 2*(d+1) > len(lit) {
			return dst
		}
		return append(dst, lit[d+1:len(lit)-d-1]...)
	}
	return dst
}
