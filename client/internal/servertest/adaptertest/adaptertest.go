package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/prometheus/client_golang/prometheus"
)

// Grid starts a grid node and returns a client of it, and the node.
func Grid(t *testing.T) (*client.Client, *gridtest.Node) {
	t.Helper()
	n := gridtest.Start(t)
	return Dial(t, n), n
}

// Dial returns a client of n, closed when the test ends.
func Dial(t *testing.T, n *gridtest.Node) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Effects records what handlers did, per key.
type Effects struct {
	mu     sync.Mutex
	n      map[string]int
	tokens map[string][]uint64
	corr   map[string]string
}

// NewEffects returns an empty record.
func NewEffects() *Effects {
	return &Effects{n: map[string]int{}, tokens: map[string][]uint64{}, corr: map[string]string{}}
}

// Add records that a handler applied l's key under l, with ctx's
// correlation id.
func (e *Effects) Add(ctx context.Context, l client.Lease) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[l.Key]++
	e.tokens[l.Key] = append(e.tokens[l.Key], l.Token)
	e.corr[l.Key] = client.CorrelationID(ctx)
}

// Get is how many times key was applied.
func (e *Effects) Get(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[key]
}

// FirstToken is the token key was first applied under.
func (e *Effects) FirstToken(key string) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.tokens[key]) == 0 {
		return 0
	}
	return e.tokens[key][0]
}

// Correlation is the correlation id key's handler saw last.
func (e *Effects) Correlation(key string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.corr[key]
}

// String lists the counts.
func (e *Effects) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return fmtCounts(e.n)
}

// Counted is the adapter's count of messages with outcome o settled by
// action a in reg.
func Counted(t *testing.T, reg *prometheus.Registry, name string, o adapter.Outcome, a adapter.Action) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["adapter"] == name && labels["outcome"] == string(o) && labels["action"] == string(a) {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// Start runs consume (an adapter's Consume) until stop is called or the
// test ends; stop cancels its context and returns its error, and the test
// fails if it is not nil when the test ends.
func Start(t *testing.T, consume func(ctx context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- consume(ctx) }()
	stop = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("Consume did not return within 30s of its context ending")
		}
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Consume: %v", err)
		}
	})
	return stop
}

func fmtCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s:%d ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}
