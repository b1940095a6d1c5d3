package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridproc"
)

// proc is a gridnode serve child process.
type proc struct {
	*gridproc.Proc
	addr string // its gRPC address, once waitReady has returned
}

// startServe runs "gridnode serve" on dir and waits for its ready line.
func startServe(t testing.TB, dir string, more ...string) *proc {
	t.Helper()
	p := launchProc(t, os.Stderr, append([]string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "", "--log-level", "warn"}, more...)...)
	p.waitReady(t, 60*time.Second)
	return p
}

// launchProc starts "gridnode serve" with args, its log going to stderr.
// The process is killed when the test ends, if it still runs.
func launchProc(t testing.TB, stderr io.Writer, args ...string) *proc {
	t.Helper()
	return launchProcIn(t, stderr, nil, args...)
}

// launchProcIn is launchProc through the command prefix wrap, which must
// exec the program in place (as "ip netns exec NS" does), so that the
// process signalled is gridnode itself.
func launchProcIn(t testing.TB, stderr io.Writer, wrap []string, args ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := gridproc.Start(gridproc.Options{
		Argv:   append(append(slices.Clone(wrap), exe, "serve"), args...),
		Env:    append(os.Environ(), "GRIDNODE_EXEC=1"),
		Stderr: stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return &proc{Proc: p}
}

// waitReady waits for the ready line of p.
func (p *proc) waitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	a, err := p.WaitReady(context.Background(), timeout)
	if err != nil {
		t.Fatalf("gridnode: %v", err)
	}
	p.addr = a.GRPC
}

func (p *proc) kill9(t testing.TB) {
	t.Helper()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
}

type want struct {
	state  client.State
	token  uint64
	result string
}

// TestKill9KeepsAcknowledged: 10,000 distinct keys reserved by 50 concurrent
// callers are all ACQUIRED; some are then completed, failed or poisoned; after
// kill -9 and a restart on the same data directory every acknowledged state
// is there, and tokens keep increasing per key. Then SIGTERM stops the node
// cleanly.
func TestKill9KeepsAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	dir := t.TempDir()
	p := startServe(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, p.addr)
	if err != nil {
		t.Fatal(err)
	}
	const callers, perCaller = 50, 200
	wants := make(map[string]want, callers*perCaller)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perCaller {
				n := g*perCaller + i
				key := fmt.Sprintf("msg-%05d", n)
				r, err := c.Reserve(ctx, "crash", key, client.WithLease(time.Hour))
				if err != nil || r.Outcome != client.OutcomeAcquired {
					errs <- fmt.Errorf("reserve %s: %v %v", key, r.Outcome, err)
					return
				}
				w := want{state: client.StateProcessing, token: r.Token}
				switch {
				case n%10 < 3: // 30% completed with a result
					w.result = "done-" + key
					_, err = c.Complete(ctx, "crash", key, r.Token, client.WithResult([]byte(w.result)))
					w.state = client.StateCompleted
				case n%10 == 3: // 10% failed, retry in an hour
					_, err = c.Fail(ctx, "crash", key, r.Token, client.WithRetryAfter(time.Hour))
					w.state = client.StateFailed
				case n%100 == 4: // 1% poisoned
					_, err = c.Fail(ctx, "crash", key, r.Token, client.WithPoison())
					w.state = client.StatePoisoned
				}
				if err != nil {
					errs <- fmt.Errorf("settle %s: %v", key, err)
					return
				}
				mu.Lock()
				wants[key] = w
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(wants) != callers*perCaller {
		t.Fatalf("%d keys acknowledged, want %d", len(wants), callers*perCaller)
	}
	c.Close()
	p.kill9(t)

	p = startServe(t, dir)
	c, err = client.Dial(ctx, p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkAll(ctx, t, c, wants)

	// Tokens keep increasing per key (they are per shard): forget a few
	// settled keys and take them again.
	for _, key := range []string{"msg-00001", "msg-01002", "msg-05003", "msg-09999"} {
		if _, err := c.Forget(ctx, "crash", key); err != nil {
			t.Fatal(err)
		}
		again, err := c.Reserve(ctx, "crash", key)
		if err != nil || again.Outcome != client.OutcomeAcquired || again.Token <= wants[key].token {
			t.Fatalf("reserve of %s after restart: %+v %v (token before %d)", key, again, err, wants[key].token)
		}
	}
	dup, err := c.Reserve(ctx, "crash", "msg-00000")
	if err != nil || dup.Outcome != client.OutcomeDuplicate || string(dup.Result) != "done-msg-00000" {
		t.Fatalf("duplicate after restart: %+v %v", dup, err)
	}

	// Graceful stop: SIGTERM drains and exits 0.
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
		if err := p.Err(); err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGTERM")
	}
}

// checkAll reads every key back in batches and compares with wants.
func checkAll(ctx context.Context, t *testing.T, c *client.Client, wants map[string]want) {
	t.Helper()
	keys := make([]string, 0, len(wants))
	for k := range wants {
		keys = append(keys, k)
	}
	for start := 0; start < len(keys); start += 1000 {
		chunk := keys[start:min(start+1000, len(keys))]
		ops := make([]client.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = client.GetOp("crash", k, client.WithShowToken()) // the operator view: tokens too
		}
		res, errs, err := c.Batch(ctx, ops)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range chunk {
			w, r := wants[k], res[i]
			if errs[i] != nil || r.State != w.state || r.Token != w.token || string(r.Result) != w.result {
				t.Fatalf("%s after kill -9: state %v token %d result %q err %v; want %v %d %q",
					k, r.State, r.Token, r.Result, errs[i], w.state, w.token, w.result)
			}
		}
	}
}
