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
		"neg. budget":  WithRetryPolicy(RetryPolicy{Budget: -time.Second}),
		"neg. timeout": WithSendTimeout(-time.Second),
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

// TestRetryPolicyAgain: the retry policy as data. For a send number and the
// time since the first send: whether the call is sent again, and the most
// the backoff waits before that send.
func TestRetryPolicyAgain(t *testing.T) {
	const ms = time.Millisecond
	def := DefaultRetryPolicy()
	counted := RetryPolicy{Attempts: 4, BaseBackoff: 50 * ms, MaxBackoff: time.Second}
	both := RetryPolicy{Budget: time.Second, Attempts: 3, BaseBackoff: 100 * ms, MaxBackoff: 400 * ms}
	for _, tc := range []struct {
		name    string
		p       RetryPolicy
		attempt int
		elapsed time.Duration
		ok      bool
		ceiling time.Duration
	}{
		{"default: first retry at once", def, 1, 0, true, 25 * ms},
		{"default: doubling", def, 3, 300 * ms, true, 100 * ms},
		{"default: capped", def, 9, 3 * time.Second, true, 500 * ms},
		{"default: many sends within the budget", def, 40, 9 * time.Second, true, 500 * ms},
		{"default: the last backoff ends at the budget", def, 40, 9800 * ms, true, 200 * ms},
		{"default: budget spent", def, 12, 10 * time.Second, false, 0},
		{"default: an election is ridden through", def, 6, 1500 * ms, true, 500 * ms},
		{"counted: third send", counted, 2, 5 * time.Second, true, 100 * ms},
		{"counted: attempts spent", counted, 4, 0, false, 0},
		{"both: attempts first", both, 3, 100 * ms, false, 0},
		{"both: budget first", both, 2, 1100 * ms, false, 0},
		{"both: within both", both, 2, 500 * ms, true, 200 * ms},
		{"one attempt", RetryPolicy{Attempts: 1, Budget: time.Minute}, 1, 0, false, 0},
		{"zero policy sends once", RetryPolicy{}, 1, 0, false, 0},
	} {
		ceiling, ok := tc.p.again(tc.attempt, tc.elapsed)
		if ok != tc.ok || ceiling != tc.ceiling {
			t.Errorf("%s: again(%d, %v) = %v, %v; want %v, %v", tc.name, tc.attempt, tc.elapsed, ceiling, ok, tc.ceiling, tc.ok)
		}
	}
	if def.Budget < 8*time.Second || DefaultSendTimeout*4 > def.Budget {
		t.Errorf("default budget %v and send timeout %v: an election must fit with room to spare", def.Budget, DefaultSendTimeout)
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
