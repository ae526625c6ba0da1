package pgmanager

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// writeFile replaces path atomically (write a temporary file, fsync,
// rename) so that a crash never leaves Postgres a half-written
// configuration file, and gives it to the OS user.
func (i *Instance) writeFile(path string, data []byte, mode os.FileMode) error {
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("pgmanager: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode) // the umask may have narrowed or O_CREATE kept an old mode
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = i.user.chown(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("pgmanager: writing %s: %w", path, err)
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// tailBuffer keeps the last max bytes written to it: enough of a tool's
// output to explain a failure, without holding everything it printed.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return lastLines(t.buf, 20)
}

// lastLines returns at most n trailing lines of b.
func lastLines(b []byte, n int) string {
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(string(bytes.Join(lines, []byte("\n"))))
}

// logTail returns the last lines Postgres wrote to Dir/postgres.log after
// offset: what an error about a failed start should show.
func (i *Instance) logTail(offset int64) string {
	f, err := os.Open(i.logPath())
	if err != nil {
		return ""
	}
	defer f.Close()
	const window = 8 << 10
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	start := max(offset, st.Size()-window, 0)
	if start > st.Size() {
		start = 0 // the log was truncated by someone else
	}
	b, err := io.ReadAll(io.NewSectionReader(f, start, st.Size()-start))
	if err != nil {
		return ""
	}
	return lastLines(b, 20)
}

// withLog appends a log excerpt to an error message when there is one.
func withLog(msg, tail string) string {
	if tail == "" {
		return msg
	}
	return msg + "; postgres.log ends with:\n" + tail
}
