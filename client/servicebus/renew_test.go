package servicebus

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// failingRenewals is a Receiver whose lock renewals all fail, counting
// them.
type failingRenewals struct {
	Receiver
	calls atomic.Int64
}

func (f *failingRenewals) RenewMessageLock(context.Context, *azservicebus.ReceivedMessage, *azservicebus.RenewMessageLockOptions) error {
	f.calls.Add(1)
	return errors.New("renew: service busy")
}

// TestFailedRenewalsBackOff: while the service refuses lock renewals, the
// adapter tries again after a growing backoff instead of every 10 ms
// (the lock it failed to move is nearly over): in 1.5 s of a handler's
// run, a handful of calls (100 ms, 200 ms, 400 ms, 800 ms apart), where
// the old loop made about 150.
func TestFailedRenewalsBackOff(t *testing.T) {
	f := &failingRenewals{}
	r := &receiver{rcv: f}
	until := time.Now().Add(time.Second) // a lock with a second left
	msg := &azservicebus.ReceivedMessage{LockedUntil: &until}
	stop := r.renewLock(context.Background(), msg)
	// The handler's run: a fixed span the renewals happen in.
	<-time.After(1500 * time.Millisecond)
	stop()
	if n := f.calls.Load(); n < 2 || n > 6 {
		t.Fatalf("%d renewals in 1.5 s while every one failed, want 2 to 6 (a backoff from 100 ms doubling)", n)
	}
}
