package client

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDialValidatesOptions(t *testing.T) {
	for name, opt := range map[string]Option{
		"batch 0":      WithMaxBatchSize(0),
		"batch 1001":   WithMaxBatchSize(1001),
		"in-flight 0":  WithMaxInFlight(0),
		"retry":        WithRetryPolicy(RetryPolicy{Attempts: 3, BaseBackoff: time.Second, MaxBackoff: time.Millisecond}),
		"nil clock":    WithClock(nil),
		"neg. backoff": WithRetryPolicy(RetryPolicy{Attempts: 3, BaseBackoff: -1}),
	} {
		if _, err := Dial(context.Background(), "127.0.0.1:1", opt); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestBackoffIsCappedAndJittered(t *testing.T) {
	p := RetryPolicy{Attempts: 10, BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	for attempt, upper := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 5: time.Second, 60: time.Second} {
		for range 100 {
			d := p.backoff(attempt)
			if d < upper/2 || d > upper {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", attempt, d, upper/2, upper)
			}
		}
	}
	if d := (RetryPolicy{}).backoff(3); d != 0 {
		t.Fatalf("zero policy backoff %v", d)
	}
}

func TestOperationOptionsBuildRequests(t *testing.T) {
	op := ReserveOp("ns", "k", WithLease(1500*time.Millisecond), WithMaxAttempts(3), WithFingerprint(9), WithEntity("order-1", 4), WithPoisonRetention(time.Hour))
	r := op.pb.GetReserve()
	if r.GetLeaseMs() != 1500 || r.GetMaxAttempts() != 3 || r.GetFingerprint() != 9 || r.Fingerprint == nil ||
		string(r.GetEntity()) != "order-1" || r.GetVersion() != 4 || r.GetPoisonRetentionMs() != 3600000 {
		t.Fatalf("reserve request %v", r)
	}
	if ReserveOp("ns", "k").pb.GetReserve().GetLeaseMs() != 30000 {
		t.Fatal("default lease")
	}
	if ExtendOp("ns", "k", 1, 0).pb.GetExtend().GetLeaseMs() != 30000 {
		t.Fatal("default extend lease")
	}
	c := CompleteOp("ns", "k", 5, WithRetention(2*time.Hour), WithResult([]byte("x"))).pb.GetComplete()
	if c.GetToken() != 5 || c.GetRetentionMs() != 7200000 || string(c.GetResult()) != "x" {
		t.Fatalf("complete request %v", c)
	}
	if f := FailOp("ns", "k", 5).pb.GetFail(); f.RetryAfterMs != nil || f.GetPoison() {
		t.Fatalf("plain fail request %v", f)
	}
	if g := GetOp("ns", "k", WithStaleOK()).pb.GetGet(); !g.GetStaleOk() {
		t.Fatal("stale ok")
	}
}
