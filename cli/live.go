package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// liveLine shows a long operation's progress: on a terminal, one line
// redrawn in place; elsewhere (a pipe, a file, a CI log) a plain line each
// time the progress changes.
type liveLine struct {
	w       io.Writer
	tty     bool
	started time.Time
	last    string
	drawn   bool
}

func newLiveLine(w io.Writer) *liveLine {
	f, ok := w.(*os.File)
	return &liveLine{w: w, tty: ok && term.IsTerminal(int(f.Fd())), started: time.Now()}
}

// show displays the progress, prefixed with the time since the start.
func (l *liveLine) show(progress string) {
	elapsed := time.Since(l.started).Truncate(time.Second)
	if l.tty {
		// Carriage return, then erase to the end of the line.
		fmt.Fprintf(l.w, "\r\x1b[K%7s  %s", elapsed, progress)
		l.drawn = true
	} else if progress != l.last {
		fmt.Fprintf(l.w, "%7s  %s\n", elapsed, progress)
	}
	l.last = progress
}

// done ends the redrawn line, so what follows starts on a line of its own.
func (l *liveLine) done() {
	if l.drawn {
		fmt.Fprintln(l.w)
		l.drawn = false
	}
}
