package client

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/digest"
)

func TestDefaultLeaseMargin(t *testing.T) {
	ms := time.Millisecond
	for lease, want := range map[time.Duration]time.Duration{
		time.Hour:        6 * time.Minute, // lease/10
		30 * time.Second: 3 * time.Second,
		5 * time.Second:  500 * ms,
		2500 * ms:        250 * ms, // lease/10 = the max clock offset
		time.Second:      250 * ms, // the max clock offset
		500 * ms:         250 * ms, // both the offset and lease/2
		400 * ms:         200 * ms, // lease/2, below the offset
		100 * ms:         50 * ms,
	} {
		if got := DefaultLeaseMargin(lease); got != want {
			t.Errorf("DefaultLeaseMargin(%v) = %v, want %v", lease, got, want)
		}
	}
	if digest.DefaultMaxClockOffset != 250*ms {
		t.Fatalf("the table assumes a 250 ms max clock offset, not %v", digest.DefaultMaxClockOffset)
	}
}

// TestSafeUntilTakesWhatTheAnswerLeaves: the rule, as data. The remaining
// lease comes from the answer (deadline - now, both by the grid's clock),
// counted from the client's clock before the first send.
func TestSafeUntilTakesWhatTheAnswerLeaves(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	grid := start.Add(time.Hour) // the grid's clock is an hour ahead: irrelevant
	s := time.Second
	for _, c := range []struct {
		name          string
		now, deadline time.Time
		asked, margin time.Duration
		want          time.Time
	}{
		{"fresh grant", grid, grid.Add(10 * s), 10 * s, s, start.Add(9 * s)},
		// A resent Reserve got its own grant back, made 6 s earlier: only
		// 4 s are left, and they count from before this call's first send.
		{"replayed grant", grid, grid.Add(4 * s), 10 * s, s, start.Add(3 * s)},
		// An Extend may leave more than it asked for (the grid never
		// shortens a lease), or less (an older grid): the answer decides.
		{"extend left longer", grid, grid.Add(25 * s), 10 * s, s, start.Add(24 * s)},
		{"answer without a deadline", grid, time.Time{}, 10 * s, s, start.Add(9 * s)},
		{"answer already expired", grid, grid.Add(-s), 10 * s, s, start.Add(-2 * s)},
	} {
		got := safeUntil(start, Result{Now: c.now, Deadline: c.deadline}, c.asked, c.margin)
		if !got.Equal(c.want) {
			t.Errorf("%s: safe until %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLeaseMarginAndRequestIDOptions: the options are checked before
// anything is sent, with errors that name the limit.
func TestLeaseMarginAndRequestIDOptions(t *testing.T) {
	c, f := dialFake(t)
	ctx := testCtx(t)
	for name, op := range map[string]Op{
		"negative margin":      ReserveOp("ns", "k", WithLeaseMargin(-time.Millisecond)),
		"margin of the lease":  ReserveOp("ns", "k", WithLease(time.Second), WithLeaseMargin(time.Second)),
		"extend margin":        ExtendOp("ns", "k", 1, time.Second, WithLeaseMargin(2*time.Second)),
		"request id too long":  ReserveOp("ns", "k", WithRequestID(strings.Repeat("x", digest.MaxRequestIDLen+1))),
		"default lease margin": ReserveOp("ns", "k", WithLeaseMargin(DefaultLease)),
	} {
		_, _, err := c.one(ctx, op)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
		if _, errs, err := c.Batch(ctx, []Op{GetOp("ns", "x"), op}); !errors.Is(err, ErrInvalidArgument) || !errors.Is(errs[0], ErrInvalidArgument) {
			t.Errorf("%s in a batch: %v", name, err)
		}
	}
	if _, err := c.Process(ctx, "ns", "k", nil2, WithLease(time.Second), WithLeaseMargin(-1)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("process with a negative margin: %v", err)
	}
	if len(f.received()) != 0 {
		t.Fatal("refused operations were sent")
	}

	a, b := ReserveOp("ns", "k").pb.GetReserve(), ReserveOp("ns", "k").pb.GetReserve()
	if len(a.GetRequestId()) != 16 || bytes.Equal(a.GetRequestId(), b.GetRequestId()) {
		t.Fatalf("request ids %x and %x: want 16 random bytes each", a.GetRequestId(), b.GetRequestId())
	}
	if id := ReserveOp("ns", "k", WithRequestID("delivery-7")).pb.GetReserve().GetRequestId(); string(id) != "delivery-7" {
		t.Fatalf("request id %q", id)
	}
	if id := ReserveOp("ns", "k", WithRequestID("")).pb.GetReserve().GetRequestId(); len(id) != 0 {
		t.Fatalf("WithRequestID(\"\") sent %x", id)
	}
	r, err := c.Reserve(ctx, "ns", "k", WithRequestID(strings.Repeat("y", digest.MaxRequestIDLen)))
	if err != nil || r.Outcome != OutcomeAcquired {
		t.Fatalf("reserve with a 64-byte request id: %+v %v", r, err)
	}
	var got []byte
	for _, op := range f.received() {
		got = op.GetReserve().GetRequestId()
	}
	if len(got) != digest.MaxRequestIDLen {
		t.Fatalf("sent request id of %d bytes", len(got))
	}
}

// BenchmarkNewRequestID is the cost of drawing a Reserve's request id.
func BenchmarkNewRequestID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = newRequestID()
	}
}
