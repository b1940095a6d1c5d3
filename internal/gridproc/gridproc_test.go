package gridproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/l4xg/grid/internal/testwait"
)

// The test binary doubles as the child: GRIDPROC_CHILD says what it does.
func TestMain(m *testing.M) {
	switch os.Getenv("GRIDPROC_CHILD") {
	case "":
		os.Exit(m.Run())
	case "serve":
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		fmt.Println("a log line")
		fmt.Print("ready: http 127.0.0.1:1111\nready: gr") // a line split across writes
		fmt.Println("pc 127.0.0.1:2222")
		fmt.Println("ready: grpc 127.0.0.1:3333") // a second ready line: the first counts
		<-sig
		os.Exit(0)
	case "exit":
		fmt.Fprintln(os.Stderr, "cannot start")
		os.Exit(2)
	case "silent":
		signal.Ignore(syscall.SIGTERM) // Stop has to kill it
		fmt.Println("ignoring SIGTERM")
		time.Sleep(time.Hour)
	}
}

// syncBuffer is a strings.Builder safe for the copying goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, child string, stdout *syncBuffer) *Proc {
	t.Helper()
	o := Options{Argv: []string{os.Args[0]}, Env: append(os.Environ(), "GRIDPROC_CHILD="+child)}
	if stdout != nil {
		o.Stdout = stdout
	}
	p, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

func TestReadyLinesAndStop(t *testing.T) {
	var out syncBuffer
	p := start(t, "serve", &out)
	a, err := p.WaitReady(context.Background(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if a != (Addrs{GRPC: "127.0.0.1:2222", HTTP: "127.0.0.1:1111"}) || p.Addrs() != a || p.PID() <= 0 {
		t.Fatalf("addrs %+v (%+v), pid %d", a, p.Addrs(), p.PID())
	}
	p.Stop(time.Minute)
	if err := p.Err(); err != nil {
		t.Fatalf("stopped with SIGTERM: %v, want a clean exit", err)
	}
	if !strings.HasPrefix(out.String(), "a log line\nready: http") {
		t.Fatalf("stdout copy %q", out.String())
	}
}

func TestExitBeforeReady(t *testing.T) {
	p := start(t, "exit", nil)
	if _, err := p.WaitReady(context.Background(), time.Minute); !errors.Is(err, ErrExited) {
		t.Fatalf("err %v, want ErrExited", err)
	}
	select {
	case <-p.Ready():
		t.Fatal("ready without a ready line")
	default:
	}
}

func TestNotReadyInTime(t *testing.T) {
	var out syncBuffer
	p := start(t, "silent", &out)
	if _, err := p.WaitReady(context.Background(), 50*time.Millisecond); !errors.Is(err, ErrNotReady) {
		t.Fatalf("err %v, want ErrNotReady", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.WaitReady(ctx, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	testwait.For(t, time.Minute, "the child to ignore SIGTERM", func() bool { return out.String() != "" })
	p.Stop(100 * time.Millisecond)
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("a process ignoring SIGTERM stopped with %v, want killed", err)
	}
}
