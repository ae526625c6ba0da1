package engine

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/tesseradb/tessera/pgerr"
)

// Spill files hold rows an operator could not keep in memory, as DataRow
// messages one after another (the shards' own framing: a row is written
// and read back as the bytes it arrived as). A file's name is removed as
// soon as it is made: the open file is all that is left of it, so it
// goes away when the query closes it, and with the process if the
// router dies.

// SpillArea is where a router's queries spill, and the quota of bytes
// they may have there together.
type SpillArea struct {
	dir   string
	quota int64
	used  atomic.Int64
}

// NewSpillArea spills into dir ("" for the system's temporary
// directory), at most quota bytes at once.
func NewSpillArea(dir string, quota int64) *SpillArea {
	if dir == "" {
		dir = os.TempDir()
	}
	return &SpillArea{dir: dir, quota: quota}
}

// Used is what the router's queries have in spill files now.
func (a *SpillArea) Used() int64 { return a.used.Load() }

// errSpillQuota: the spill area's quota is used up (disk_full, as
// Postgres says when it cannot write a temporary file).
func errSpillQuota(quota int64) error {
	return pgerr.New("53100", "could not write to a temporary file: the router's spill quota of %d bytes is used up", quota)
}

// errNoSpillArea: an operator passed its memory budget where nothing may
// spill (out_of_memory).
var errNoSpillArea = pgerr.New("53200", "out of memory: the query passed its memory budget (tessera.query_memory) and the router has no spill area")

// spillBuffer is the size of a spill file's write or read buffer. These
// are not counted in the budget: an Aggregate writes to at most
// aggPartitions files at once, a Sort's merge reads at most maxRuns.
const spillBuffer = 16 << 10

// spillFile is one file of rows, written once, then read once.
type spillFile struct {
	f       *os.File
	w       *bufio.Writer
	area    *SpillArea
	written int64
}

// newSpillFile makes a file in the query's spill area.
func (m *Memory) newSpillFile() (*spillFile, error) {
	if m == nil || m.spill == nil {
		return nil, errNoSpillArea
	}
	f, err := os.CreateTemp(m.spill.dir, "tessera-spill-*")
	if err != nil {
		return nil, diskError(err)
	}
	os.Remove(f.Name())
	sf := &spillFile{f: f, w: bufio.NewWriterSize(f, spillBuffer), area: m.spill}
	q := m
	if m.query != nil {
		q = m.query
	}
	q.files = append(q.files, sf)
	return sf, nil
}

func (s *spillFile) write(msg []byte) error {
	n := int64(len(msg))
	if s.area.used.Add(n) > s.area.quota {
		s.area.used.Add(-n)
		return errSpillQuota(s.area.quota)
	}
	s.written += n
	if _, err := s.w.Write(msg); err != nil {
		return diskError(err)
	}
	return nil
}

// rows returns the file's rows, in the order they were written; the
// file is then done with writing.
func (s *spillFile) rows() (*spillReader, error) {
	if err := s.w.Flush(); err != nil {
		return nil, diskError(err)
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, diskError(err)
	}
	s.w = nil
	return &spillReader{r: bufio.NewReaderSize(s.f, spillBuffer)}, nil
}

// close frees the file and its share of the quota; the query's Memory
// calls it.
func (s *spillFile) close() {
	if s.f == nil {
		return
	}
	s.f.Close()
	s.f = nil
	s.area.used.Add(-s.written)
}

// diskError is a failure to write or read a spill file, with the
// SQLSTATE Postgres gives it: 53100 when the disk is full.
func diskError(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return pgerr.New("53100", "could not write to a temporary file: %v", err)
	}
	return pgerr.New(pgerr.InternalError, "spill file: %v", err)
}

// spillReader reads a spill file's rows back, each in a buffer of its
// own (the operators above may keep it).
type spillReader struct {
	r *bufio.Reader
}

func (s *spillReader) Next() (Row, bool, error) {
	var head [5]byte
	if _, err := io.ReadFull(s.r, head[:]); err != nil {
		if err == io.EOF {
			return Row{}, false, nil
		}
		return Row{}, false, diskError(err)
	}
	size := int(binary.BigEndian.Uint32(head[1:]))
	if head[0] != 'D' || size < 6 {
		return Row{}, false, fmt.Errorf("a spill file holds a message %q of %d bytes", head[0], size)
	}
	msg := make([]byte, 1+size)
	copy(msg, head[:])
	if _, err := io.ReadFull(s.r, msg[5:]); err != nil {
		return Row{}, false, diskError(err)
	}
	r, err := ParseDataRow(msg)
	return r, err == nil, err
}
