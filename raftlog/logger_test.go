package raftlog

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// recorded is one record a recordHandler received.
type recorded struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

// recordHandler keeps every record it handles, with the attributes of its
// logger (With) and of the record, at every level.
type recordHandler struct {
	mu    *sync.Mutex
	out   *[]recorded
	attrs []slog.Attr
}

func newRecordHandler() *recordHandler {
	return &recordHandler{mu: new(sync.Mutex), out: new([]recorded)}
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	rec := recorded{level: r.Level, msg: r.Message, attrs: map[string]any{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.Any()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Any()
		return true
	})
	h.mu.Lock()
	*h.out = append(*h.out, rec)
	h.mu.Unlock()
	return nil
}

func (h *recordHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

func (h *recordHandler) WithGroup(string) slog.Handler { return h }

func (h *recordHandler) records() []recorded {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]recorded(nil), *h.out...)
}

// A warning and an error reach the slog handler at their levels, with
// their key/value pairs, the group the logger was made for and the hclog
// name; trace, debug and info do not at the default level.
func TestLoggerForwardsWarnAndAbove(t *testing.T) {
	h := newRecordHandler()
	lg := NewLogger(slog.New(h).With("shard", uint64(3)))
	if lg.GetLevel() != hclog.Warn || lg.IsInfo() || !lg.IsWarn() || !lg.IsError() {
		t.Fatalf("default level %v (info %v, warn %v, error %v), want warn", lg.GetLevel(), lg.IsInfo(), lg.IsWarn(), lg.IsError())
	}
	lg.Trace("trace line", "k", 1)
	lg.Debug("debug line", "k", 1)
	lg.Info("info line", "k", 1)
	lg.Log(hclog.NoLevel, "no level line")
	boom := errors.New("boom")
	lg.Named("snapshot").Warn("failed to contact", "server-id", "node-2", "error", boom)
	lg.Error("failed to appendEntries", "peer", "node-3")

	got := h.records()
	if len(got) != 2 {
		t.Fatalf("records %+v, want the warning and the error only", got)
	}
	w := got[0]
	if w.level != slog.LevelWarn || w.msg != "failed to contact" || w.attrs["server-id"] != "node-2" ||
		w.attrs["error"] != boom || w.attrs["shard"] != uint64(3) || w.attrs["logger"] != "snapshot" {
		t.Errorf("warning %+v", w)
	}
	e := got[1]
	if e.level != slog.LevelError || e.msg != "failed to appendEntries" || e.attrs["peer"] != "node-3" ||
		e.attrs["shard"] != uint64(3) || e.attrs["logger"] != nil {
		t.Errorf("error %+v", e)
	}
}

// SetLevel moves the level of the logger and of those derived from it;
// With adds its pairs to every later message and to ImpliedArgs.
func TestLoggerLevelAndWith(t *testing.T) {
	h := newRecordHandler()
	lg := NewLogger(slog.New(h).With("group", "control"))
	sub := lg.With("snapshot-id", "2-10").Named("raft")
	lg.SetLevel(hclog.Info)
	sub.Info("starting snapshot")
	lg.Debug("still off")
	if n := sub.ImpliedArgs(); len(n) != 2 || n[0] != "snapshot-id" {
		t.Errorf("implied args %v", n)
	}
	got := h.records()
	if len(got) != 1 || got[0].level != slog.LevelInfo || got[0].attrs["snapshot-id"] != "2-10" ||
		got[0].attrs["group"] != "control" || got[0].attrs["logger"] != "raft" {
		t.Fatalf("records %+v, want the info line with its pairs", got)
	}
	lg.SetLevel(hclog.Off)
	sub.Error("not written")
	if n := len(h.records()); n != 1 {
		t.Errorf("%d records after SetLevel(Off), want 1", n)
	}
}

// A logger's standard library writer forwards each line, at the level of
// its prefix when asked to infer it.
func TestLoggerStandardWriter(t *testing.T) {
	h := newRecordHandler()
	lg := NewLogger(slog.New(h))
	lg.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}).Println("[WARN] memberlist: suspect")
	lg.StandardLogger(nil).Println("[ERR] not inferred: info")
	got := h.records()
	if len(got) != 1 || got[0].level != slog.LevelWarn || got[0].msg != "memberlist: suspect" {
		t.Fatalf("records %+v", got)
	}
}

// A nil slog logger discards.
func TestLoggerNil(t *testing.T) {
	lg := NewLogger(nil)
	lg.Error("dropped")
	if lg.IsError() {
		t.Fatal("a nil logger says it writes errors")
	}
}
