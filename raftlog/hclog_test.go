package raftlog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestRaftLoggerForwardsWarnAndAbove(t *testing.T) {
	var buf bytes.Buffer
	l := RaftLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "raft", nil).With("shard", 3)
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
	l := RaftLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})), "raft", nil)
	l.Warn("failed to contact", "server-id", "node-3")
	if buf.Len() != 0 || l.IsWarn() {
		t.Errorf("a warn passed a handler at error level: %q", buf.String())
	}
	l.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}).Print("[ERROR] raft: boom")
	if !strings.Contains(buf.String(), `level=ERROR msg="raft: boom" logger=raft`) {
		t.Errorf("standard logger line not forwarded at its inferred level: %q", buf.String())
	}
}

// TestRaftLoggerQuietAboutPeersWhileStopping: Raft's warnings and errors
// about a peer are errors until the node stops on purpose, and info (below
// the default warn) after; its other errors stay errors.
func TestRaftLoggerQuietAboutPeersWhileStopping(t *testing.T) {
	var buf bytes.Buffer
	var stopping atomic.Bool
	l := RaftLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "raft", stopping.Load).With("shard", 1)
	peerLines := func() {
		l.Error("failed to appendEntries to", "peer", "{Voter node-2 127.0.0.1:7421}", "error", "EOF")
		l.Error("failed to heartbeat to", "peer", "127.0.0.1:7421", "backoff time", "10ms", "error", "EOF")
		l.Error("failed to make requestVote RPC", "target", "{Voter node-2 127.0.0.1:7421}", "error", "EOF", "term", 3)
		l.Error("peer has newer term, stopping replication", "peer", "{Voter node-2 127.0.0.1:7421}")
		l.Warn("failed to contact", "server-id", "node-2", "time", "500ms")
	}
	peerLines()
	l.Error("failed to append to logs", "error", "disk full")
	before := buf.String()
	if n := strings.Count(before, "level=ERROR"); n != 5 {
		t.Errorf("%d error lines from a node not stopping, want 5:\n%s", n, before)
	}
	if n := strings.Count(before, "level=WARN"); n != 1 {
		t.Errorf("%d warn lines from a node not stopping, want 1:\n%s", n, before)
	}

	buf.Reset()
	stopping.Store(true)
	peerLines()
	if buf.Len() != 0 {
		t.Errorf("lines about peers logged while stopping, at raft's default warn level:\n%s", buf.String())
	}
	l.Error("failed to append to logs", "error", "disk full")
	if !strings.Contains(buf.String(), `level=ERROR msg="failed to append to logs"`) {
		t.Errorf("an error about no peer lost its level while stopping:\n%s", buf.String())
	}

	buf.Reset()
	l.SetLevel(hclog.Info)
	peerLines()
	if n := strings.Count(buf.String(), "level=INFO"); n != 5 || strings.Contains(buf.String(), "level=ERROR") {
		t.Errorf("while stopping, with raft at info: %d info lines about peers, want 5:\n%s", n, buf.String())
	}
}
