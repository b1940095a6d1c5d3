package client_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/l4xg/grid/internal/gridtest"
)

// TestMain runs the tests and examples, stops the examples' grid node, and
// checks that no goroutine leaked.
func TestMain(m *testing.M) {
	code := m.Run()
	examples.close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// examples is the grid node shared by the Example functions, started on
// first use: examples have no testing.TB of their own.
var examples exampleGrid

type exampleGrid struct {
	once sync.Once
	tb   *mainTB
	addr string
}

// gridAddr is the address of a running grid node ("127.0.0.1:7420" in
// production).
func gridAddr() string {
	examples.once.Do(func() {
		examples.tb = &mainTB{}
		examples.addr = gridtest.Start(examples.tb).Addr()
	})
	return examples.addr
}

func (g *exampleGrid) close() {
	if g.tb != nil {
		g.tb.cleanup()
	}
}

// mainTB is the testing.TB that gridtest.Start needs, outside of a test. It
// implements what gridtest calls (Helper, TempDir, Cleanup, Errorf, Fatalf);
// any other method panics on the nil embedded interface.
type mainTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	dirs     []string
}

func (*mainTB) Helper() {}

func (t *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "gridtest-example-")
	if err != nil {
		t.Fatalf("tempdir: %v", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dirs = append(t.dirs, dir)
	return dir
}

func (t *mainTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (*mainTB) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "example grid: "+format+"\n", args...)
}

func (*mainTB) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("example grid: "+format, args...))
}

func (t *mainTB) cleanup() {
	t.mu.Lock()
	fs, dirs := t.cleanups, t.dirs
	t.cleanups, t.dirs = nil, nil
	t.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}
