package launch

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The durable Redis has its write in the append-only file when it answers,
// runs with appendfsync always, and leaves no process or data behind.
func TestStartDurableRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skipf("redis-server not on PATH: %v", err)
	}
	ctx := context.Background()
	s, err := StartDurableRedis(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	if err := rdb.Set(ctx, "launch-durable-key", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.ConfigGet(ctx, "appendfsync").Result()
	if err != nil || got["appendfsync"] != "always" {
		t.Fatalf("appendfsync %v, %v", got, err)
	}
	aof, _ := filepath.Glob(filepath.Join(s.dir, "appendonlydir", "*.incr.aof"))
	if len(aof) != 1 {
		t.Fatalf("append-only files %v, want one", aof)
	}
	b, err := os.ReadFile(aof[0])
	if err != nil || !strings.Contains(string(b), "launch-durable-key") {
		t.Fatalf("the answered SET is not in %s (%v):\n%q", aof[0], err, b)
	}
	rdb.Close()
	s.Stop()
	<-s.proc.Exited()
	if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data dir %s left behind: %v", s.dir, err)
	}
}
