package raftlog

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// DefaultLogLevel is the level from which NewLogger forwards hashicorp/raft's
// messages: its warnings and errors (elections lost, failed appends, slow
// snapshots). Its info and debug messages (every heartbeat timeout, every
// snapshot step) stay out of the node's log unless SetLevel lowers it.
const DefaultLogLevel = hclog.Warn

// NewLogger returns the hclog.Logger that hashicorp/raft, its transport
// and its snapshot store log through: it forwards each message at
// DefaultLogLevel and above to l, at the matching slog level, with the
// message's key/value pairs as attributes, and the hclog name, if any, as
// the attribute "logger". Name the Raft group in l (l.With("shard", id)).
// A nil l discards everything.
//
// Loggers derived with With, Named and ResetNamed share the level, as
// hclog's do. The handler of l still applies its own level on top.
func NewLogger(l *slog.Logger) hclog.Logger {
	if l == nil {
		return hclog.NewNullLogger()
	}
	lg := &slogLogger{l: l, level: new(atomic.Int32)}
	lg.level.Store(int32(DefaultLogLevel))
	return lg
}

// slogLogger is an hclog.Logger writing to a *slog.Logger.
type slogLogger struct {
	l       *slog.Logger
	name    string
	implied []any
	level   *atomic.Int32 // an hclog.Level, shared by the derived loggers
}

var _ hclog.Logger = (*slogLogger)(nil)

// slogLevel is the slog level of an hclog level; hclog's Trace, below
// Debug, becomes slog's Debug-4.
func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (g *slogLogger) enabled(level hclog.Level) bool {
	from := hclog.Level(g.level.Load())
	return level != hclog.Off && from != hclog.Off && level >= from &&
		g.l.Enabled(context.Background(), slogLevel(level))
}

func (g *slogLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if !g.enabled(level) {
		return
	}
	if g.name != "" {
		args = append(args, "logger", g.name)
	}
	g.l.Log(context.Background(), slogLevel(level), msg, args...)
}

func (g *slogLogger) Trace(msg string, args ...any) { g.Log(hclog.Trace, msg, args...) }
func (g *slogLogger) Debug(msg string, args ...any) { g.Log(hclog.Debug, msg, args...) }
func (g *slogLogger) Info(msg string, args ...any)  { g.Log(hclog.Info, msg, args...) }
func (g *slogLogger) Warn(msg string, args ...any)  { g.Log(hclog.Warn, msg, args...) }
func (g *slogLogger) Error(msg string, args ...any) { g.Log(hclog.Error, msg, args...) }

func (g *slogLogger) IsTrace() bool { return g.enabled(hclog.Trace) }
func (g *slogLogger) IsDebug() bool { return g.enabled(hclog.Debug) }
func (g *slogLogger) IsInfo() bool  { return g.enabled(hclog.Info) }
func (g *slogLogger) IsWarn() bool  { return g.enabled(hclog.Warn) }
func (g *slogLogger) IsError() bool { return g.enabled(hclog.Error) }

func (g *slogLogger) ImpliedArgs() []any { return g.implied }

func (g *slogLogger) With(args ...any) hclog.Logger {
	c := *g
	c.l = g.l.With(args...)
	c.implied = append(append([]any(nil), g.implied...), args...)
	return &c
}

func (g *slogLogger) Name() string { return g.name }

func (g *slogLogger) Named(name string) hclog.Logger {
	if g.name != "" {
		name = g.name + "." + name
	}
	return g.ResetNamed(name)
}

func (g *slogLogger) ResetNamed(name string) hclog.Logger {
	c := *g
	c.name = name
	return &c
}

func (g *slogLogger) SetLevel(level hclog.Level) { g.level.Store(int32(level)) }

func (g *slogLogger) GetLevel() hclog.Level { return hclog.Level(g.level.Load()) }

func (g *slogLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(g.StandardWriter(opts), "", 0)
}

func (g *slogLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	if opts == nil {
		opts = &hclog.StandardLoggerOptions{}
	}
	return &stdWriter{g: g, opts: *opts}
}

// stdWriter takes each write as one message of a standard library logger.
type stdWriter struct {
	g    *slogLogger
	opts hclog.StandardLoggerOptions
}

func (w *stdWriter) Write(b []byte) (int, error) {
	msg := string(bytes.TrimRight(b, " \t\n"))
	level := hclog.Info
	if w.opts.InferLevels || w.opts.ForceLevel != hclog.NoLevel {
		msg, level = stripLevel(msg)
	}
	if w.opts.ForceLevel != hclog.NoLevel {
		level = w.opts.ForceLevel
	}
	w.g.Log(level, msg)
	return len(b), nil
}

// stripLevel takes the level prefix hclog's standard loggers recognise
// ("[WARN] ...") off msg and returns its level, Info if it has none.
func stripLevel(msg string) (string, hclog.Level) {
	for _, p := range [...]struct {
		prefix string
		level  hclog.Level
	}{
		{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info},
		{"[WARN]", hclog.Warn}, {"[ERR]", hclog.Error}, {"[ERROR]", hclog.Error},
	} {
		if rest, ok := strings.CutPrefix(msg, p.prefix); ok {
			return strings.TrimSpace(rest), p.level
		}
	}
	return msg, hclog.Info
}
