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

	"github.com/l4xg/grid/api/gridpb"
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
// the retry-after-ms trailer. The limit is each node's: an operation a node
// forwards counts on it and on the node it reaches (a client cannot mark
// its calls forwarded to pass uncounted).
type RateLimiter struct {
	rate float64 // operations per second
	now  func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewRateLimiter limits every namespace to perSecond operations a second.
func NewRateLimiter(perSecond float64) *RateLimiter {
	return &RateLimiter{rate: perSecond, now: time.Now, buckets: map[string]*bucket{}}
}

// take takes n operations of ns, or says how long until they fit.
func (l *RateLimiter) take(ns string, n int) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
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
	if b.tokens >= float64(n) {
		b.tokens -= float64(n)
		return 0, true
	}
	wait := time.Duration((float64(n) - b.tokens) / l.rate * float64(time.Second))
	return wait, false
}

// dropFull forgets the buckets that have refilled: they hold no debt.
func (l *RateLimiter) dropFull(now time.Time) {
	for ns, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.rate {
			delete(l.buckets, ns)
		}
	}
}

// opsByNamespace counts the operations of a request by namespace.
func opsByNamespace(req any) map[string]int {
	out := map[string]int{}
	var ops []*gridpb.Op
	switch r := req.(type) {
	case *gridpb.BatchRequest:
		ops = r.GetOps()
	case *gridpb.StreamRequest:
		ops = r.GetOps()
	default:
		if ns := namespaceOf(req); ns != "" {
			out[ns]++
		}
		return out
	}
	for _, op := range ops {
		_, _, ns := opNeeds(op)
		if ns != "" {
			out[ns]++
		}
	}
	return out
}

// admit takes the operations of req, or refuses the request.
func (l *RateLimiter) admit(ctx context.Context, req any) error {
	for ns, n := range opsByNamespace(req) {
		if wait, ok := l.take(ns, n); !ok {
			ms := max(1, wait.Milliseconds())
			_ = grpc.SetTrailer(ctx, metadata.Pairs(MetadataRetryAfter, strconv.FormatInt(ms, 10)))
			return status.Error(codes.ResourceExhausted, fmt.Sprintf("namespace %q is over its rate limit of %g operations per second: retry after %d ms", ns, l.rate, ms))
		}
	}
	return nil
}

// Unary is the rate-limit interceptor of unary calls.
func (l *RateLimiter) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if isGrid(info.FullMethod) {
		if err := l.admit(ctx, req); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

// Stream is the rate-limit interceptor of streams: each frame's operations
// are taken as it arrives; a frame over the limit ends the stream.
func (l *RateLimiter) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !isGrid(info.FullMethod) {
		return handler(srv, ss)
	}
	return handler(srv, &limitedStream{ServerStream: ss, l: l})
}

type limitedStream struct {
	grpc.ServerStream
	l *RateLimiter
}

func (s *limitedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.l.admit(s.Context(), m)
}
