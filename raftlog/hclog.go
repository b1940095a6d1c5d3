package raftlog

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// RaftLogger returns an hclog.Logger, the logger hashicorp/raft and its
// snapshot store and transport take, that writes to l: an operator sees
// Raft's warnings and errors in the node's own log. It logs at warn and
// above (Raft is chatty at info: every election, every peer it starts
// replicating to); SetLevel lowers that. The name becomes the "logger"
// attribute ("raft" and the group, say), Named and With add to it as
// hclog does.
//
// stopping, if not nil, reports whether the node is stopping on purpose
// (Mux.Stopping). While it does, Raft's warnings and errors about a peer
// are logged at info: its failures to reach one (AppendEntries,
// heartbeats, votes), a peer not heard from, a peer's newer term after a
// hand-over. They are what a stop looks like from the inside (the peers
// go away too when the whole cluster stops) and nothing an operator can
// act on; the same lines from a node that is not stopping stay errors.
// Raft names the peer of such a line in a "peer", "target" or "server-id"
// attribute (aboutPeer); lines without one (its log store, its
// snapshots) keep their level.
func RaftLogger(l *slog.Logger, name string, stopping func() bool) hclog.Logger {
	lv := &atomic.Int32{}
	lv.Store(int32(hclog.Warn))
	return &slogLogger{l: l, name: name, level: lv, stopping: stopping}
}

// slogLogger adapts a *slog.Logger to hclog.Logger. Loggers derived with
// With or Named share their parent's level.
type slogLogger struct {
	l        *slog.Logger
	name     string
	implied  []any
	level    *atomic.Int32 // an hclog.Level
	stopping func() bool   // nil: never
}

// aboutPeer reports whether args (alternating keys and values) name a
// peer under one of the keys hashicorp/raft (1.7) gives a peer in its
// warnings and errors about one.
func aboutPeer(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "peer", "target", "server-id":
			return true
		}
	}
	return false
}

var _ hclog.Logger = (*slogLogger)(nil)

// slogLevel maps hclog's levels onto slog's (Trace below Debug).
func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Info:
		return slog.LevelInfo
	case hclog.Warn:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (s *slogLogger) enabled(level hclog.Level) bool {
	return level != hclog.Off && level >= hclog.Level(s.level.Load()) && s.l.Enabled(context.Background(), slogLevel(level))
}

func (s *slogLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if (level == hclog.Warn || level == hclog.Error) && s.stopping != nil && aboutPeer(args) && s.stopping() {
		level = hclog.Info
	}
	if !s.enabled(level) {
		return
	}
	attrs := make([]any, 0, 2+len(s.implied)+len(args))
	if s.name != "" {
		attrs = append(attrs, "logger", s.name)
	}
	attrs = append(attrs, s.implied...)
	attrs = append(attrs, args...)
	s.l.Log(context.Background(), slogLevel(level), msg, attrs...)
}

func (s *slogLogger) Trace(msg string, args ...any) { s.Log(hclog.Trace, msg, args...) }
func (s *slogLogger) Debug(msg string, args ...any) { s.Log(hclog.Debug, msg, args...) }
func (s *slogLogger) Info(msg string, args ...any)  { s.Log(hclog.Info, msg, args...) }
func (s *slogLogger) Warn(msg string, args ...any)  { s.Log(hclog.Warn, msg, args...) }
func (s *slogLogger) Error(msg string, args ...any) { s.Log(hclog.Error, msg, args...) }

func (s *slogLogger) IsTrace() bool { return s.enabled(hclog.Trace) }
func (s *slogLogger) IsDebug() bool { return s.enabled(hclog.Debug) }
func (s *slogLogger) IsInfo() bool  { return s.enabled(hclog.Info) }
func (s *slogLogger) IsWarn() bool  { return s.enabled(hclog.Warn) }
func (s *slogLogger) IsError() bool { return s.enabled(hclog.Error) }

func (s *slogLogger) ImpliedArgs() []any { return s.implied }

func (s *slogLogger) With(args ...any) hclog.Logger {
	c := *s
	c.implied = append(append([]any(nil), s.implied...), args...)
	return &c
}

func (s *slogLogger) Name() string { return s.name }

func (s *slogLogger) Named(name string) hclog.Logger {
	c := *s
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (s *slogLogger) ResetNamed(name string) hclog.Logger {
	c := *s
	c.name = name
	return &c
}

func (s *slogLogger) SetLevel(level hclog.Level) { s.level.Store(int32(level)) }

func (s *slogLogger) GetLevel() hclog.Level { return hclog.Level(s.level.Load()) }

func (s *slogLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(s.StandardWriter(opts), "", 0)
}

// StandardWriter logs each line written at info, or at the level its
// "[LEVEL]" prefix names when opts asks to infer levels.
func (s *slogLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	infer := opts != nil && opts.InferLevels
	return writerFunc(func(p []byte) (int, error) {
		line := strings.TrimRight(string(p), "\n")
		level := hclog.Info
		if infer {
			for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
				tag := "[" + strings.ToUpper(lv.String()) + "]"
				if rest, ok := strings.CutPrefix(line, tag); ok {
					level, line = lv, strings.TrimSpace(rest)
					break
				}
			}
		}
		s.Log(level, line)
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
