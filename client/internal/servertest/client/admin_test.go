package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridtest"
)

// TestDrain on a real 3-node cluster: a node asked to drain itself ("")
// goes draining at once; asked again through another node, which takes it
// to the control leader, it ends removed with no replica left. An unknown
// node is NotFound, and a standalone node refuses to drain.
func TestDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl := gridtest.StartCluster(t, gridtest.ClusterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial := func(addr string) *client.Client {
		c, err := client.Dial(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	third, first := dial(cl.Addrs()[2]), dial(cl.Addrs()[0])

	// 3 nodes, 3 replicas: draining one would under-replicate every shard.
	if _, err := third.Drain(ctx, ""); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "force") {
		t.Fatalf("unforced drain of one of 3 nodes with 3 replicas: %v, want FailedPrecondition saying how to force", err)
	}
	st, err := third.Drain(ctx, "", client.DrainForce())
	if err != nil || st.NodeID != "node-3" || st.State != "draining" && st.State != "removed" || st.Epoch == 0 {
		t.Fatalf("drain of the dialled node: %+v %v", st, err)
	}
	epoch := st.Epoch
	deadline := time.Now().Add(30 * time.Second)
	for st.State != "removed" {
		if time.Now().After(deadline) {
			t.Fatalf("node-3 not removed within 30s: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
		if st, err = first.Drain(ctx, "node-3"); err != nil || st.NodeID != "node-3" {
			t.Fatalf("drain again: %+v %v", st, err)
		}
	}
	if st.ReplicasLeft != 0 || st.Epoch <= epoch {
		t.Fatalf("removed node: %+v (epoch at the request %d)", st, epoch)
	}

	if _, err := first.Drain(ctx, "node-9"); status.Code(err) != codes.NotFound {
		t.Fatalf("drain of an unknown node: %v", err)
	}
	n := gridtest.Start(t)
	if _, err := dial(n.Addr()).Drain(ctx, ""); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("drain of a standalone node: %v", err)
	}
}
