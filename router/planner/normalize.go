package planner

import "strconv"

// Normalize returns sql as query insights group it: the plan cache's shape
// (comments dropped, whitespace runs made one space) with each literal
// written $1, $2, ... in order, as pg_stat_statements shows statements.
// False: the scanner does not model some of the text, so its literals
// (a password, say) cannot be told apart and nothing is returned. It
// scans, it does not parse.
func Normalize(sql string) (string, bool) {
	sc := scans.Get().(*scan)
	defer scans.Put(sc)
	sc.run(sql)
	if sc.odd {
		return "", false
	}
	out := make([]byte, 0, len(sc.shape)+8)
	n := 0
	for i := 0; i < len(sc.shape); i++ {
		if sc.shape[i] == placeholder {
			n++
			out = append(out, '$')
			out = strconv.AppendInt(out, int64(n), 10)
			i++ // the literal's class
			continue
		}
		out = append(out, sc.shape[i])
	}
	return string(out), true
}
