package router

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
)

// What the engine's operators hold in memory is bounded twice: per query
// by the session's tessera.query_memory, and per router by
// MemoryConfig.Budget, shared by every query. Past either, sorts,
// aggregations and DISTINCT spill to files under SpillDir, at most
// SpillQuota bytes for the whole router (package engine).

// defaultQueryMemory is tessera.query_memory's default: 64 MiB.
const defaultQueryMemory = 64 << 20

// minQueryMemory is the least tessera.query_memory takes (Postgres's
// work_mem takes 64kB too).
const minQueryMemory = 64 << 10

// MemoryConfig bounds what a router's queries hold and spill.
type MemoryConfig struct {
	// Budget is what all the router's queries may hold at once in
	// sorts, aggregations and DISTINCT (default 1 GiB).
	Budget int64
	// SpillDir is where they spill past a budget (default: the system's
	// temporary directory).
	SpillDir string
	// SpillQuota is what they may have in spill files at once (default
	// 16 GiB); past it a query fails with 53100.
	SpillQuota int64
}

func (m MemoryConfig) withDefaults() MemoryConfig {
	if m.Budget == 0 {
		m.Budget = 1 << 30
	}
	if m.SpillQuota == 0 {
		m.SpillQuota = 16 << 30
	}
	return m
}

func (m MemoryConfig) validate() error {
	var errs []error
	if m.Budget < minQueryMemory {
		errs = append(errs, fmt.Errorf("the router's memory budget must be at least 64kB, not %d bytes", m.Budget))
	}
	if m.SpillQuota < 0 {
		errs = append(errs, errors.New("the spill quota must not be negative"))
	}
	return errors.Join(errs...)
}

// ParseMemory reads a size as Postgres reads memory settings: a number
// with a unit (B, kB, MB, GB, TB) or without one, in kB.
func ParseMemory(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size (a number and B, kB, MB, GB or TB)", s)
	}
	unit := int64(1 << 10)
	switch strings.TrimSpace(s[i:]) {
	case "B":
		unit = 1
	case "", "kB":
	case "MB":
		unit = 1 << 20
	case "GB":
		unit = 1 << 30
	case "TB":
		unit = 1 << 40
	default:
		return 0, fmt.Errorf(`%q: valid units are "B", "kB", "MB", "GB" and "TB"`, s)
	}
	if n > (1<<62)/unit {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * unit, nil
}

// FormatMemory writes a size as Postgres shows memory settings: in the
// largest unit that divides it.
func FormatMemory(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 40, "TB"}, {1 << 30, "GB"}, {1 << 20, "MB"}, {1 << 10, "kB"}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// parseQueryMemory checks a value of tessera.query_memory.
func parseQueryMemory(value string) (int64, error) {
	n, err := ParseMemory(value)
	if err == nil && n < minQueryMemory {
		err = fmt.Errorf("%s is less than the minimum, 64kB", value)
	}
	if err != nil {
		return 0, pgerr.New(pgerr.InvalidParameterValue, `invalid value for parameter "tessera.query_memory": %v`, err)
	}
	return n, nil
}
