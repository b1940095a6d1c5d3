package api

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MetadataRetryAfter is the trailer of a call refused by a rate limit: the
// milliseconds until the namespace has room again.
const MetadataRetryAfter = "retry-after-ms"

// maxLimited bounds the namespaces a RateLimiter tracks; past it, the
// buckets that are full again are dropped first.
const maxLimited = 1 << 16

// RateLimiter limits the operations of each namespace to a rate, with a
// burst of one second's worth (a token bucket per namespace), so that one
// tenant's retry storm cannot starve the others: an operation past it is
// refused with ResourceExhausted, naming the namespace and the limit, and
// the retry-after-ms trailer (in a stream, each operation of the refused
// frame is answered so, with its retry_after_ms, and the stream goes on).
// A request of more operations than the burst is taken once the bucket is
// full, and leaves it in debt: it is never refused for good. A request is
// taken whole or not at all: refused in one of its namespaces, it takes
// nothing from the others. The limit is each node's: an operation a node
// forwards counts on it and on the node it reaches (a client cannot mark
// its calls forwarded to pass uncounted).
type RateLimiter struct {
	rate float64 // operations per second
	now  func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

// bucket is a namespace's tokens at last; negative after a request larger
// than the burst (debt).
type bucket struct {
	tokens float64
	last   time.Time
}

// NewRateLimiter limits every namespace to perSecond operations a second,
// refilling its buckets by the clock now (nil: time.Now).
func NewRateLimiter(perSecond float64, now func() time.Time) *RateLimiter {
	if now == nil {
		now = time.Now
	}
	return &RateLimiter{rate: perSecond, now: now, buckets: map[string]*bucket{}}
}

// take takes the operations counts[ns] of every namespace, or none of them
// and says which namespace refused and how long until it has room. A
// namespace has room for n operations when its bucket holds n tokens, or
// is full when n is more than the burst.
func (l *RateLimiter) take(counts map[string]int) (refused string, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for ns, n := range counts {
		b := l.bucket(ns, now)
		if need := min(float64(n), l.rate); b.tokens < need {
			if w := time.Duration((need - b.tokens) / l.rate * float64(time.Second)); refused == "" || w > wait {
				refused, wait = ns, w
			}
		}
	}
	if refused != "" {
		return refused, wait
	}
	for ns, n := range counts {
		l.buckets[ns].tokens -= float64(n)
	}
	return "", 0
}

// bucket returns ns's bucket refilled up to now, made full if new.
func (l *RateLimiter) bucket(ns string, now time.Time) *bucket {
	b := l.buckets[ns]
	if b == nil {
		if len(l.buckets) >= maxLimited {
			l.dropFull(now)
		}
		b = &bucket{tokens: l.rate, last: now}
		l.buckets[ns] = b
	}
	b.tokens = min(l.rate, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	return b
}

// dropFull forgets the buckets that have refilled: they hold no debt.
func (l *RateLimiter) dropFull(now time.Time) {
	for ns, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.rate {
			delete(l.buckets, ns)
		}
	}
}

// opsByNamespace counts the operations of a request by namespace: its
// accesses that name one.
func opsByNamespace(method string, req any) map[string]int {
	out := map[string]int{}
	for _, acc := range accesses(method, req) {
		if acc.ns != "" {
			out[acc.ns]++
		}
	}
	return out
}

// admit takes the operations of req, a request of method, or refuses it:
// nil when taken.
func (l *RateLimiter) admit(method string, req any) *rateLimited {
	ns, wait := l.take(opsByNamespace(method, req))
	if ns == "" {
		return nil
	}
	ms := max(1, wait.Milliseconds())
	return &rateLimited{ms: ms, err: status.Error(codes.ResourceExhausted,
		fmt.Sprintf("namespace %q is over its rate limit of %g operations per second: retry after %d ms", ns, l.rate, ms))}
}

// rateLimited is a request refused by the rate limit: ResourceExhausted,
// to retry after ms milliseconds.
type rateLimited struct {
	ms  int64
	err error
}

func (e *rateLimited) Error() string              { return e.err.Error() }
func (e *rateLimited) Unwrap() error              { return e.err }
func (e *rateLimited) GRPCStatus() *status.Status { return status.Convert(e.err) }

// Unary is the rate-limit interceptor of unary calls; Stream frames are
// limited where they are served (Server.serveFrame), so that a refused
// frame's operations are answered and the stream goes on.
func (l *RateLimiter) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if isGrid(info.FullMethod) {
		if rl := l.admit(info.FullMethod, req); rl != nil {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(MetadataRetryAfter, strconv.FormatInt(rl.ms, 10)))
			return nil, rl
		}
	}
	return handler(ctx, req)
}
