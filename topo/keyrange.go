package topo

import (
	"fmt"
	"sort"
	"strings"
)

// parseBound decodes a key-range bound: up to 16 hexadecimal digits, the
// most significant digits of a 64-bit routing key ("80" is
// 0x8000000000000000). The empty string is unbounded.
func parseBound(s string) (v uint64, unbounded bool, err error) {
	if s == "" {
		return 0, true, nil
	}
	if len(s) > 16 {
		return 0, false, fmt.Errorf("%q has %d hex digits, at most 16 fit the 64-bit routing space", s, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false, fmt.Errorf("%q is not a hexadecimal prefix", s)
		}
		v |= d << (60 - 4*uint(i))
	}
	return v, false, nil
}

// formatBound writes a routing key as the shortest hexadecimal prefix that
// denotes it (at least two digits), or "" when unbounded.
func formatBound(v uint64, unbounded bool) string {
	if unbounded {
		return ""
	}
	s := strings.TrimRight(fmt.Sprintf("%016x", v), "0")
	for len(s) < 2 {
		s += "0"
	}
	return s
}

func (r KeyRange) String() string {
	return "[" + formatBound(r.start, r.start == 0) + "," + formatBound(r.end, r.endOpen) + ")"
}

// checkRanges decodes a group's key ranges and checks that they cover the
// routing space exactly once, filling g.byStart and g.starts.
func checkRanges(path string, g *ShardGroup, ps *problems) {
	g.byStart, g.starts = coverage(join(path, "key_ranges"), g.KeyRanges, ps)
}

// coverage decodes the bounds of ranges (at rpath) and checks that they
// cover the routing space exactly once; it returns them sorted by start,
// with their starts, or nothing when they do not.
func coverage(rpath string, ranges []KeyRange, ps *problems) (byStart []KeyRange, starts []uint64) {
	if len(ranges) == 0 {
		ps.add(rpath, "a shard group needs at least one key range")
		return nil, nil
	}
	type indexed struct {
		KeyRange
		i int
	}
	var valid []indexed
	for i := range ranges {
		r := &ranges[i]
		p := index(rpath, i)
		ok := true
		if r.ShardUID == "" {
			ps.add(join(p, "shard_uid"), "required")
			ok = false
		}
		start, _, err := parseBound(r.Start)
		if err != nil {
			ps.add(join(p, "start"), "%v", err)
			ok = false
		}
		end, endOpen, err := parseBound(r.End)
		if err != nil {
			ps.add(join(p, "end"), "%v", err)
			ok = false
		}
		r.start, r.end, r.endOpen = start, end, endOpen
		if ok && !endOpen && end <= start {
			ps.add(p, "empty range %s: start must be below end", r)
			ok = false
		}
		if ok {
			valid = append(valid, indexed{*r, i})
		}
	}
	if len(valid) < len(ranges) {
		return nil, nil
	}
	sort.SliceStable(valid, func(a, b int) bool { return valid[a].start < valid[b].start })
	var cursor uint64 // every key below cursor is covered
	var prev *indexed
	full := false // the whole space up to the top is covered
	bad := false
	for k := range valid {
		r := &valid[k]
		switch {
		case full || r.start < cursor:
			ps.add(index(rpath, r.i), "overlaps %s", prev.KeyRange)
			bad = true
		case r.start > cursor:
			ps.add(rpath, "keys %s belong to no shard", KeyRange{start: cursor, end: r.start})
			bad = true
		}
		if r.endOpen {
			full = true
		} else if r.end > cursor {
			cursor = r.end
		}
		prev = r
	}
	if !full {
		ps.add(rpath, "keys %s belong to no shard", KeyRange{start: cursor, endOpen: true})
		bad = true
	}
	if bad {
		return nil, nil
	}
	for _, r := range valid {
		byStart = append(byStart, r.KeyRange)
		starts = append(starts, r.start)
	}
	return byStart, starts
}
