package client

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
)

func TestOutcomeAndStateMatchTheWire(t *testing.T) {
	for o := OutcomeOK; o <= OutcomeLeaseLost; o++ {
		if got, want := o.String(), gridpb.Outcome(o).String(); got != want {
			t.Errorf("outcome %d: %q, wire %q", o, got, want)
		}
	}
	for s := StateAbsent; s <= StatePoisoned; s++ {
		want := strings.TrimPrefix(gridpb.State(s).String(), "STATE_")
		if got := s.String(); got != want {
			t.Errorf("state %d: %q, wire %q", s, got, want)
		}
	}
	if Outcome(99).String() != "Outcome(99)" || State(99).String() != "State(99)" {
		t.Error("unknown values")
	}
}

func TestResultErr(t *testing.T) {
	for o, want := range map[Outcome]error{
		OutcomeOK:          nil,
		OutcomeAcquired:    nil,
		OutcomeDuplicate:   nil,
		OutcomeBusy:        ErrBusy,
		OutcomePoisoned:    ErrPoisoned,
		OutcomeStale:       ErrStale,
		OutcomeMismatch:    ErrMismatch,
		OutcomeLeaseLost:   ErrLeaseLost,
		OutcomeUnspecified: errProtocol,
	} {
		err := Result{Outcome: o}.Err()
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Errorf("%v: Err() = %v, want %v", o, err, want)
		}
	}
}

func TestFromPB(t *testing.T) {
	fp := uint64(0xfeed)
	r := fromPB(&gridpb.OpResult{
		Outcome: gridpb.Outcome_DUPLICATE, State: gridpb.State_COMPLETED, Token: 7 << 16, Attempt: 2,
		DeadlineUnixMs: 2000, RetryAfterMs: 1500, CompletedAtUnixMs: 1000, Result: []byte("r"),
		Fingerprint: &fp, NowUnixMs: 1500, Existed: true,
	})
	want := Result{
		Outcome: OutcomeDuplicate, State: StateCompleted, Token: 7 << 16, Attempt: 2,
		Deadline: time.UnixMilli(2000), RetryAfter: 1500 * time.Millisecond, CompletedAt: time.UnixMilli(1000),
		Result: []byte("r"), Fingerprint: 0xfeed, HasFingerprint: true, Now: time.UnixMilli(1500), Existed: true,
	}
	if r.Outcome != want.Outcome || r.State != want.State || r.Token != want.Token || r.Attempt != want.Attempt ||
		!r.Deadline.Equal(want.Deadline) || r.RetryAfter != want.RetryAfter || !r.CompletedAt.Equal(want.CompletedAt) ||
		string(r.Result) != "r" || r.Fingerprint != want.Fingerprint || !r.HasFingerprint || !r.Now.Equal(want.Now) || !r.Existed {
		t.Fatalf("fromPB = %+v\nwant %+v", r, want)
	}
	zero := fromPB(&gridpb.OpResult{Outcome: gridpb.Outcome(42)})
	if zero.Outcome != OutcomeUnspecified || !zero.Deadline.IsZero() || zero.HasFingerprint {
		t.Fatalf("zero fields: %+v", zero)
	}
}

func TestMillis(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 0, time.Nanosecond: 1, time.Millisecond: 1, 1500 * time.Microsecond: 2, time.Second: 1000, -time.Second: -1000} {
		if got := millis(d); got != want {
			t.Errorf("millis(%v) = %d, want %d", d, got, want)
		}
	}
}
