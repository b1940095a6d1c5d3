package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/l4xg/grid/client"
)

// A consumer processes each message through Process: the handler runs at
// most once at a time per key, and a redelivered message is answered with
// the stored result without running it again.
func ExampleClient_Process() {
	ctx := context.Background()
	c, err := client.Dial(ctx, gridAddr())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	charge := func(ctx context.Context, l client.Lease) ([]byte, error) {
		// Pass l.Token to the payment service: it refuses older tokens.
		fmt.Println("charging, attempt", l.Attempt)
		return []byte("charge-42"), nil
	}
	for range 2 { // the broker delivers the message twice
		out, err := c.Process(ctx, "payments", "invoice-2026-0001", charge)
		switch {
		case errors.Is(err, client.ErrBusy):
			// Another consumer is on it: nack, the broker redelivers.
		case errors.Is(err, client.ErrPoisoned):
			// Dead-letter the message.
		case errors.Is(err, client.ErrStale):
			// An older version of the entity: ack and drop.
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("result %s, duplicate %v\n", out.Result, out.Duplicate)
		}
	}
	// Output:
	// charging, attempt 1
	// result charge-42, duplicate false
	// result charge-42, duplicate true
}

// A handler chooses what happens to a failed message: Poison sends it to
// the dead-letter path at once, RetryAfter sets the delay before the next
// attempt, and any other error retries after the grid's backoff.
func ExamplePoison() {
	ctx := context.Background()
	c, err := client.Dial(ctx, gridAddr())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	parse := func(ctx context.Context, l client.Lease) ([]byte, error) {
		return nil, client.Poison(errors.New("payload is not JSON"))
	}
	_, err = c.Process(ctx, "orders", "msg-7f3a", parse)
	fmt.Println(errors.Is(err, client.ErrPoisoned))

	// The message comes back: it is poisoned without running the handler.
	_, err = c.Process(ctx, "orders", "msg-7f3a", parse)
	fmt.Println(err)
	// Output:
	// true
	// client: poisoned (attempts: 1)
}

// The operations one by one: reserve the key, do the work, complete it.
func ExampleClient_Reserve() {
	ctx := context.Background()
	c, err := client.Dial(ctx, gridAddr())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	r, err := c.Reserve(ctx, "shipping", "order-991", client.WithLease(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Outcome, r.State, r.Attempt)
	// Trust the lease until r.SafeUntil, by this machine's clock: 10 s from
	// just before the Reserve was sent, minus the 1 s margin. r.Deadline is
	// the grid's clock.
	work, cancel := context.WithDeadline(ctx, r.SafeUntil)
	defer cancel()
	_ = work // do the work under it, passing r.Token to downstream writes

	again, err := c.Reserve(ctx, "shipping", "order-991")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(again.Outcome, errors.Is(again.Err(), client.ErrBusy))

	if _, err := c.Complete(ctx, "shipping", "order-991", r.Token, client.WithResult([]byte("label-5"))); err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrLeaseLost) if another consumer took over
	}
	dup, err := c.Reserve(ctx, "shipping", "order-991")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(dup.Outcome, string(dup.Result))
	// Output:
	// ACQUIRED PROCESSING 1
	// BUSY true
	// DUPLICATE label-5
}

// Consumers that receive messages in batches can reserve them in one call.
func ExampleClient_Batch() {
	ctx := context.Background()
	c, err := client.Dial(ctx, gridAddr())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ops := []client.Op{
		client.ReserveOp("events", "evt-1"),
		client.ReserveOp("events", "evt-2"),
		client.ReserveOp("events", "evt-1"), // the same message twice in a poll
		client.ReserveOp("events", ""),      // invalid: empty key
	}
	results, errs, err := c.Batch(ctx, ops)
	if err != nil {
		log.Fatal(err)
	}
	for i := range ops {
		if errs[i] != nil {
			fmt.Println(i, errors.Is(errs[i], client.ErrInvalidArgument))
			continue
		}
		fmt.Println(i, results[i].Outcome)
	}
	// Output:
	// 0 ACQUIRED
	// 1 ACQUIRED
	// 2 BUSY
	// 3 true
}

// Get reads a key's record; Forget removes it so the message is processed
// again.
func ExampleClient_Forget() {
	ctx := context.Background()
	c, err := client.Dial(ctx, gridAddr())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if _, err := c.Process(ctx, "reports", "2026-11", func(context.Context, client.Lease) ([]byte, error) {
		return []byte("sent"), nil
	}); err != nil {
		log.Fatal(err)
	}
	g, err := c.Get(ctx, "reports", "2026-11")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(g.State, string(g.Result))

	f, err := c.Forget(ctx, "reports", "2026-11")
	if err != nil {
		log.Fatal(err)
	}
	g, err = c.Get(ctx, "reports", "2026-11")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(f.Existed, g.State)
	// Output:
	// COMPLETED sent
	// true ABSENT
}

// Dial takes options for batching, retries and the gRPC connection.
func ExampleDial() {
	ctx := context.Background()
	c, err := client.Dial(ctx, gridAddr(),
		client.WithMaxInFlight(16),
		client.WithRetryPolicy(client.RetryPolicy{Attempts: 6, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 2 * time.Second}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	leaders := 0
	for _, sh := range s.Shards {
		if sh.RaftState == "Leader" {
			leaders++
		}
	}
	fmt.Println(leaders == len(s.Shards), s.Slots)
	// Output: true 4096
}

// ClusterMap tells a standalone node from a cluster and, on a cluster, which
// node leads each shard. Dial takes several seed addresses, separated by
// commas; any one that answers is enough.
func ExampleClient_ClusterMap() {
	ctx := context.Background()
	c, err := client.Dial(ctx, gridAddr()+","+gridAddr())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	m, err := c.ClusterMap(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if m.Standalone {
		fmt.Println("standalone: every operation goes to one node")
		return
	}
	for _, sh := range m.Shards {
		fmt.Printf("shard %d: leader %s, replicas %v\n", sh.ID, sh.Leader, sh.Replicas)
	}
	// Output: standalone: every operation goes to one node
}
