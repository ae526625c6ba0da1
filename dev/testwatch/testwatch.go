// Package testwatch names the tests of a test binary that hang, before
// go test's own timeout ends it. That timeout's panic lists the running
// tests first and then every goroutine's stack, often thousands of lines:
// a CI log that keeps only the end of the output loses the names. Start,
// called from TestMain, prints shortly before the timeout the stacks of
// the goroutines running a test, shortened to the test's own frames, and
// ends the binary, so that they are the last thing it prints.
package testwatch

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"time"
)

// margin is how long before go test's timeout the watch fires: enough to
// print, short enough to leave the tests their time.
const margin = 45 * time.Second

// Start arms the watch for the binary's -test.timeout (parsing the flags
// if TestMain has not).
// It does nothing without a timeout or with one too short to matter. The
// returned function disarms it (call it once the tests have run, before
// the cluster's own shutdown, which the watch does not bound).
func Start() (stop func()) {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.timeout")
	if f == nil {
		return func() {}
	}
	d, err := time.ParseDuration(f.Value.String())
	if err != nil || d <= 2*margin {
		return func() {}
	}
	t := time.AfterFunc(d-margin, func() {
		// Every goroutine's stack goes to a file too: the test's own
		// frames say which test waits, the others what it waits for.
		all := make([]byte, 64<<20)
		all = all[:runtime.Stack(all, true)]
		where := ""
		if f, err := os.CreateTemp("", "testwatch-*.txt"); err == nil {
			f.Write(all)
			f.Close()
			where = " (every goroutine's stack: " + f.Name() + ")"
		}
		fmt.Fprintf(os.Stdout, "\ntestwatch: tests still running %v after the binary started (timeout %v)%s:\n%s", d-margin, d, where, Running())
		os.Exit(2)
	})
	return func() { t.Stop() }
}

// testFrame matches a stack frame of a test function or of a function in
// a _test.go file.
var testFrame = regexp.MustCompile(`(?m)^\S+\.Test\w*|_test\.go:\d+`)

// Running returns the stack of each goroutine that is inside a test
// function or test file, keeping only frames of _test.go files and their
// callees' first frame, so that each one reads in a few lines.
func Running() string {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out bytes.Buffer
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		// "created by" names where a goroutine started, which for a
		// server a test started is the test: only its own frames count.
		if i := bytes.Index(g, []byte("\ncreated by ")); i >= 0 {
			g = g[:i]
		}
		if !testFrame.Match(g) {
			continue
		}
		lines := bytes.Split(g, []byte("\n"))
		out.Write(lines[0]) // goroutine N [state, minutes]:
		out.WriteByte('\n')
		// Frames come in pairs: the function, then "\tfile:line".
		for i := 1; i+1 < len(lines); i += 2 {
			if bytes.Contains(lines[i+1], []byte("_test.go:")) || i == 1 {
				out.Write(lines[i])
				out.WriteByte('\n')
				out.Write(lines[i+1])
				out.WriteByte('\n')
			}
		}
		out.WriteByte('\n')
	}
	return out.String()
}
