package temporal

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	tlog "go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

// quietLogger is what Temporal logs to when Config.Logger is nil: errors
// only, to standard error. Temporal logs a great deal at lower levels.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// slogAdapter makes an *slog.Logger a Temporal server logger. Whether a
// record is written is for the slog handler to decide.
type slogAdapter struct {
	l *slog.Logger
}

var (
	_ tlog.Logger      = slogAdapter{}
	_ tlog.WithLogger  = slogAdapter{}
	_ tlog.SLogWrapper = slogAdapter{}
)

func (a slogAdapter) Debug(msg string, tags ...tag.Tag) { a.log(slog.LevelDebug, msg, tags) }
func (a slogAdapter) Info(msg string, tags ...tag.Tag)  { a.log(slog.LevelInfo, msg, tags) }
func (a slogAdapter) Warn(msg string, tags ...tag.Tag)  { a.log(slog.LevelWarn, msg, tags) }
func (a slogAdapter) Error(msg string, tags ...tag.Tag) { a.log(slog.LevelError, msg, tags) }

// DPanic is an error: a development-mode assertion is not a reason to stop
// a dev server.
func (a slogAdapter) DPanic(msg string, tags ...tag.Tag) { a.log(slog.LevelError, msg, tags) }

// Panic and Fatal log and then panic. Temporal's own logger would exit the
// process on Fatal; a panic can instead be recovered by Start when it
// happens while the server is being built (the usual case: a port that
// could not be bound), and carries a clear message otherwise.
func (a slogAdapter) Panic(msg string, tags ...tag.Tag) {
	a.log(slog.LevelError, msg, tags)
	panic(fatalError{msg: msg, tags: tags})
}

func (a slogAdapter) Fatal(msg string, tags ...tag.Tag) {
	a.log(slog.LevelError, msg, tags)
	panic(fatalError{msg: msg, tags: tags})
}

// With returns a logger that adds tags to every record.
func (a slogAdapter) With(tags ...tag.Tag) tlog.Logger {
	return slogAdapter{l: a.l.With(attrs(tags)...)}
}

// SLog lets Temporal components that log through slog use the logger
// directly.
func (a slogAdapter) SLog() *slog.Logger { return a.l }

func (a slogAdapter) log(level slog.Level, msg string, tags []tag.Tag) {
	ctx := context.Background()
	if !a.l.Enabled(ctx, level) {
		return
	}
	a.l.Log(ctx, level, msg, attrs(tags)...)
}

func attrs(tags []tag.Tag) []any {
	out := make([]any, len(tags))
	for i, t := range tags {
		out[i] = slog.Any(t.Key(), t.Value())
	}
	return out
}

// fatalError is the panic value of a Fatal or Panic log call.
type fatalError struct {
	msg  string
	tags []tag.Tag
}

func (e fatalError) Error() string {
	s := "temporal server: " + e.msg
	for _, t := range e.tags {
		s += fmt.Sprintf(" %s=%v", t.Key(), t.Value())
	}
	return s
}
