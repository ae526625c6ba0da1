package topo

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
)

// Problem is one thing wrong with a topology document, at a JSON path such
// as shard_groups[1].key_ranges[2].
type Problem struct {
	Path   string
	Reason string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Reason
	}
	return p.Path + ": " + p.Reason
}

// ValidationError lists every problem found in a topology document.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return "invalid data topology:\n  " + strings.Join(lines, "\n  ")
}

// SQLState makes a bad topology a configuration error to a client.
func (e *ValidationError) SQLState() string { return pgerr.ConfigFileError }

// problems collects Problems during decoding and validation.
type problems struct{ list []Problem }

func (ps *problems) add(path, format string, args ...any) {
	ps.list = append(ps.list, Problem{Path: path, Reason: fmt.Sprintf(format, args...)})
}

func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	return &ValidationError{Problems: ps.list}
}

func sortStrings(s []string) { sort.Strings(s) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }
