package raftlog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestRaftLoggerForwardsWarnAndAbove(t *testing.T) {
	var buf bytes.Buffer
	l := RaftLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "raft").With("shard", 3)
	l.Info("entering follower state", "term", 2)
	l.Debug("nothing to see")
	l.Warn("heartbeat timeout reached, starting election", "last-leader-id", "node-2")
	l.Named("snapshot").Error("failed to reap snapshots", "error", "disk full")
	out := buf.String()
	if strings.Contains(out, "entering follower state") || strings.Contains(out, "nothing to see") {
		t.Errorf("info and debug lines logged at the default warn level:\n%s", out)
	}
	for _, want := range []string{
		`level=WARN msg="heartbeat timeout reached, starting election" logger=raft shard=3 last-leader-id=node-2`,
		`level=ERROR msg="failed to reap snapshots" logger=raft.snapshot shard=3 error="disk full"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if l.IsInfo() || !l.IsWarn() {
		t.Errorf("IsInfo %v, IsWarn %v at the default level", l.IsInfo(), l.IsWarn())
	}
	l.SetLevel(hclog.Info)
	l.Info("entering leader state")
	if !strings.Contains(buf.String(), `level=INFO msg="entering leader state"`) {
		t.Errorf("SetLevel(Info) did not let info through:\n%s", buf.String())
	}
}

func TestRaftLoggerHonoursTheHandlerLevel(t *testing.T) {
	var buf bytes.Buffer
	l := RaftLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})), "raft")
	l.Warn("failed to contact", "server-id", "node-3")
	if buf.Len() != 0 || l.IsWarn() {
		t.Errorf("a warn passed a handler at error level: %q", buf.String())
	}
	l.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}).Print("[ERROR] raft: boom")
	if !strings.Contains(buf.String(), `level=ERROR msg="raft: boom" logger=raft`) {
		t.Errorf("standard logger line not forwarded at its inferred level: %q", buf.String())
	}
}
