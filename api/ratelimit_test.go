package api

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
)

// takeOne takes n operations of namespace ns alone.
func takeOne(l *RateLimiter, ns string, n int) (time.Duration, bool) {
	refused, wait := l.take(map[string]int{ns: n})
	return wait, refused == ""
}

// TestRateLimiterPerNamespace: a namespace gets its rate with a burst of
// one second's worth, then waits as long as its debt says; another
// namespace is not affected; time refills the bucket.
func TestRateLimiterPerNamespace(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewRateLimiter(10, func() time.Time { return now })
	for i := range 10 {
		if _, ok := takeOne(l, "a", 1); !ok {
			t.Fatalf("operation %d of a burst of 10 refused", i)
		}
	}
	wait, ok := takeOne(l, "a", 1)
	if ok || wait < 90*time.Millisecond || wait > 110*time.Millisecond {
		t.Fatalf("the 11th: ok %v, wait %v, want refused for about 100ms", ok, wait)
	}
	if _, ok := takeOne(l, "b", 10); !ok {
		t.Fatal("namespace b was held back by a's storm")
	}
	now = now.Add(500 * time.Millisecond)
	if _, ok := takeOne(l, "a", 5); !ok {
		t.Fatal("half a second later a has room for 5")
	}
	if _, ok := takeOne(l, "a", 1); ok {
		t.Fatal("a took more than it refilled")
	}
}

// TestRateLimiterTakesRequestsLargerThanTheBurst: a request of more
// operations than a second's worth is taken once the bucket is full, and
// leaves the namespace in debt for as long as it overdrew; it is refused
// only while the bucket is not full, with the wait until it is.
func TestRateLimiterTakesRequestsLargerThanTheBurst(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewRateLimiter(100, func() time.Time { return now })
	if _, ok := takeOne(l, "a", 200); !ok {
		t.Fatal("200 operations against a full bucket of 100: refused")
	}
	wait, ok := takeOne(l, "a", 1)
	if ok || wait < 1005*time.Millisecond || wait > 1015*time.Millisecond {
		t.Fatalf("right after: ok %v, wait %v; want refused for 1.01 s (1 s of debt, then the operation)", ok, wait)
	}
	now = now.Add(1500 * time.Millisecond)
	wait, ok = takeOne(l, "a", 200)
	if ok || wait < 490*time.Millisecond || wait > 510*time.Millisecond {
		t.Fatalf("1.5 s later, 200 more: ok %v, wait %v; want refused until the bucket is full, 0.5 s", ok, wait)
	}
	now = now.Add(wait)
	if _, ok := takeOne(l, "a", 200); !ok {
		t.Fatal("200 operations once the bucket is full again: refused")
	}
}

// TestRateLimiterTakesARequestWholeOrNothing: a request refused in one of
// its namespaces takes nothing from the others.
func TestRateLimiterTakesARequestWholeOrNothing(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewRateLimiter(10, func() time.Time { return now })
	if _, ok := takeOne(l, "busy", 10); !ok {
		t.Fatal("a full bucket refused 10")
	}
	if refused, _ := l.take(map[string]int{"quiet": 10, "busy": 1}); refused != "busy" {
		t.Fatalf("a request over busy's limit: refused by %q, want busy", refused)
	}
	if _, ok := takeOne(l, "quiet", 10); !ok {
		t.Fatal("quiet lost tokens to a request that was refused")
	}
}

// TestRateLimitRefusalIsResourceExhausted: the refusal of a Batch names the
// namespace and the limit as ResourceExhausted, counting every operation
// of the batch in its namespace.
func TestRateLimitRefusalIsResourceExhausted(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewRateLimiter(2, func() time.Time { return now })
	op := func(ns string) *gridpb.Op {
		return &gridpb.Op{Op: &gridpb.Op_Reserve{Reserve: &gridpb.ReserveRequest{Namespace: []byte(ns), Key: []byte("k")}}}
	}
	batch := &gridpb.BatchRequest{Ops: []*gridpb.Op{op("a"), op("a"), op("b")}}
	if rl := l.admit(gridpb.Grid_Batch_FullMethodName, batch); rl != nil {
		t.Fatalf("a batch within the limit: %v", rl)
	}
	rl := l.admit(gridpb.Grid_Batch_FullMethodName, batch)
	if rl == nil {
		t.Fatal("a second batch over a's limit was taken")
	}
	var err error = rl
	if st, ok := status.FromError(err); !ok || st.Code() != codes.ResourceExhausted || rl.ms < 1 {
		t.Fatalf("refusal %v (retry after %d ms), want ResourceExhausted with a wait", err, rl.ms)
	}
	if !errors.Is(err, rl.err) {
		t.Fatal("the refusal does not unwrap to its status")
	}
}
