package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/l4xg/grid/internal/gridproc"
)

// ErrNoRedisServer is returned when no redis-server binary is on PATH.
var ErrNoRedisServer = errors.New("launch: redis-server not found on PATH")

// RedisServer is a throwaway redis-server on a loopback port, its data in
// a temporary directory.
type RedisServer struct {
	Addr string
	proc *gridproc.Proc
	dir  string
}

// StartDurableRedis starts a redis-server with appendonly yes and
// appendfsync always, waits until it answers PING, and returns it. stderr
// receives its log (nil discards).
func StartDurableRedis(ctx context.Context, stderr io.Writer) (*RedisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	dir, err := os.MkdirTemp("", "bench-redis-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &RedisServer{Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), dir: dir}
	// Durable the way the grid is: every write is in the append-only file,
	// fsynced, before Redis answers it. Snapshots are off, so that only the
	// AOF costs.
	argv := []string{bin, "--port", fmt.Sprint(ports[0]), "--bind", "127.0.0.1",
		"--dir", dir, "--daemonize", "no", "--logfile", "", "--loglevel", "warning",
		"--appendonly", "yes", "--appendfsync", "always", "--save", ""}
	s.proc, err = gridproc.Start(gridproc.Options{Argv: argv, Stdout: stderr, Stderr: stderr,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}, // none outlives the benchmark
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("launch: start redis-server: %w", err)
	}
	if err := s.waitReady(ctx, 30*time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls PING, then checks the server runs with the durable
// settings (a redis-server that ignored them would be measured as
// something it is not).
func (s *RedisServer) waitReady(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer rdb.Close()
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			break
		}
		select {
		case <-s.proc.Exited():
			return fmt.Errorf("launch: redis-server exited before ready: %v", s.proc.Err())
		case <-ctx.Done():
			return fmt.Errorf("launch: redis-server %s not ready: %v", s.Addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	for name, want := range map[string]string{"appendonly": "yes", "appendfsync": "always"} {
		got, err := rdb.ConfigGet(ctx, name).Result()
		if err != nil {
			return fmt.Errorf("launch: redis-server CONFIG GET %s: %w", name, err)
		}
		if got[name] != want {
			return fmt.Errorf("launch: redis-server runs with %s %q, want %q", name, got[name], want)
		}
	}
	return nil
}

// Stop terminates the server and removes its data.
func (s *RedisServer) Stop() {
	s.proc.Stop(10 * time.Second)
	os.RemoveAll(s.dir)
}
