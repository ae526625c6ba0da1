package pgmanager

import (
	"fmt"
	"strconv"
	"strings"
)

// LSN is a WAL position (Postgres's pg_lsn): a byte offset into the WAL
// stream, comparable with < across instances of one cluster.
type LSN uint64

// String formats the LSN as Postgres does, e.g. "0/16B3748".
func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l)) }

// ParseLSN parses Postgres's text form, e.g. "0/16B3748".
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("pgmanager: LSN %q: want X/X", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("pgmanager: LSN %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("pgmanager: LSN %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

// parseLSNOrZero parses a possibly empty (SQL NULL) LSN.
func parseLSNOrZero(s string) (LSN, error) {
	if s == "" {
		return 0, nil
	}
	return ParseLSN(s)
}
