package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestStatusCodesMapToSentinels(t *testing.T) {
	for _, tc := range []struct {
		code codes.Code
		want error
	}{
		{codes.InvalidArgument, ErrInvalidArgument},
		{codes.ResourceExhausted, ErrLimitExceeded},
		{codes.Unavailable, ErrUnavailable},
		{codes.DeadlineExceeded, context.DeadlineExceeded},
		{codes.Canceled, context.Canceled},
	} {
		err := fromRPC(context.Background(), status.Error(tc.code, "keyspace: batch too large: 1001 operations, limit 1000"))
		if !errors.Is(err, tc.want) {
			t.Errorf("%v: %v does not match %v", tc.code, err, tc.want)
		}
		if status.Code(err) != tc.code {
			t.Errorf("%v: status.Code = %v", tc.code, status.Code(err))
		}
		if got, want := err.Error(), tc.want.Error()+": keyspace: batch too large: 1001 operations, limit 1000"; got != want {
			t.Errorf("%v: message %q, want %q", tc.code, got, want)
		}
		if retryable(err) != (tc.code == codes.Unavailable) {
			t.Errorf("%v: retryable = %v", tc.code, retryable(err))
		}
	}
	internal := fromRPC(context.Background(), status.Error(codes.Internal, "boom"))
	for _, s := range []error{ErrInvalidArgument, ErrLimitExceeded, ErrUnavailable, ErrLeaseLost} {
		if errors.Is(internal, s) {
			t.Errorf("Internal matches %v", s)
		}
	}
	if status.Code(internal) != codes.Internal || retryable(internal) {
		t.Errorf("Internal: %v", internal)
	}
	if fromCode(codes.OK, "") != nil || fromRPC(context.Background(), nil) != nil {
		t.Error("OK must map to nil")
	}
}

func TestContextErrorWinsOverStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()
	err := fromRPC(ctx, status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	cause := errors.New("consumer shutting down")
	cctx, ccancel := context.WithCancelCause(context.Background())
	ccancel(cause)
	err = fromRPC(cctx, status.Error(codes.Canceled, "context canceled"))
	if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
		t.Fatalf("err = %v, want Canceled and the cause", err)
	}
}

func TestBusyError(t *testing.T) {
	err := error(&BusyError{RetryAfter: 1500 * time.Millisecond, Attempt: 2})
	if !errors.Is(err, ErrBusy) || errors.Is(err, ErrPoisoned) {
		t.Fatal("BusyError must match ErrBusy only")
	}
	if got := err.Error(); got != "client: busy (attempt 2), retry after 1.5s" {
		t.Fatalf("message %q", got)
	}
}

func TestSentinelsArePrefixed(t *testing.T) {
	for _, e := range []error{ErrLeaseLost, ErrBusy, ErrPoisoned, ErrStale, ErrMismatch, ErrInvalidArgument, ErrLimitExceeded, ErrUnavailable, ErrClosed, ErrHandlerPanic} {
		if msg := e.Error(); len(msg) < 8 || msg[:8] != "client: " {
			t.Errorf("%q is not prefixed", msg)
		}
	}
}

func TestRedirectsSurviveErrorMapping(t *testing.T) {
	rd := &gridpb.Redirect{Shard: 3, LeaderId: "n2", LeaderAddr: "10.0.0.2:7420", Epoch: 9}
	st, err := status.New(codes.Unavailable, "api: not the leader of shard 3").WithDetails(rd)
	if err != nil {
		t.Fatal(err)
	}
	unaryErr := fromRPC(context.Background(), st.Err())
	batchErr := fromOpError(&gridpb.OpError{Code: int32(codes.Unavailable), Message: "api: not the leader of shard 3", Redirect: rd})
	for name, err := range map[string]error{"status detail": unaryErr, "batch OpError": batchErr} {
		if got := redirectOf(err); !proto.Equal(got, rd) {
			t.Errorf("%s: redirect %v, want %v", name, got, rd)
		}
		if !errors.Is(err, ErrUnavailable) || status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v is not an Unavailable error", name, err)
		}
	}
	plain := fromRPC(context.Background(), status.Error(codes.Unavailable, "shard 3: no leader"))
	if redirectOf(plain) != nil || redirectOf(ErrClosed) != nil {
		t.Error("a redirect found where there is none")
	}
}
