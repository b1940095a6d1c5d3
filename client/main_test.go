package client_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/l4xg/grid/client"
	"go.uber.org/goleak"
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

// exampleGrid is the grid the examples dial: a standalone fake, started by
// the first example that asks for it and stopped after every test ran.
type exampleGrid struct {
	once sync.Once
	addr string
	stop func()
}

func gridAddr() string {
	examples.once.Do(func() {
		addr, stop, err := client.ServeExampleGrid()
		if err != nil {
			panic(fmt.Sprintf("example grid: %v", err))
		}
		examples.addr, examples.stop = addr, stop
	})
	return examples.addr
}

func (g *exampleGrid) close() {
	if g.stop != nil {
		g.stop()
	}
}
