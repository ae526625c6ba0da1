package testwatch

import (
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestRunningNamesTheBlockedTest: a goroutine blocked in a test is listed
// with its test frame; goroutines outside tests are not.
func TestRunningNamesTheBlockedTest(t *testing.T) {
	block := make(chan struct{})
	started := make(chan struct{})
	go blockedInTest(started, block)
	<-started
	// A goroutine the test starts that runs only library code.
	pr, pw := io.Pipe()
	defer pw.Close()
	go io.Copy(io.Discard, pr)
	for !strings.Contains(allStacks(), "io.Copy") {
		time.Sleep(time.Millisecond)
	}
	defer close(block)
	got := Running()
	if !strings.Contains(got, "blockedInTest") || !strings.Contains(got, "testwatch_test.go:") {
		t.Fatalf("Running() lacks the blocked test's frame:\n%s", got)
	}
	if n := strings.Count(got, "goroutine "); n != 2 {
		t.Fatalf("Running() lists %d goroutines, want 2 (this test's and the one blocked in test code), not the one running io.Copy:\n%s", n, got)
	}
	if strings.Contains(got, "io.Copy") {
		t.Fatalf("Running() lists a goroutine that a test started but that runs no test code:\n%s", got)
	}
}

func blockedInTest(started, block chan struct{}) {
	close(started)
	<-block
}

func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
