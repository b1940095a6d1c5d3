package target

import (
	"context"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/l4xg/grid/internal/launch"
)

func TestEtcdContract(t *testing.T) {
	ctx := context.Background()
	cl, err := launch.StartEtcd(ctx, 1, nil)
	if errors.Is(err, launch.ErrNoEtcd) {
		t.Skip("etcd not on PATH")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	e, err := NewEtcd(ctx, cl.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	prefix := testPrefix()
	contract(t, e, prefix)

	// Reserved keys carry a lease of the lease's TTL, completed ones one of
	// the retention.
	for key, want := range map[string]struct {
		val string
		ttl int64
	}{prefix + "k1": {"completed", ttl(testRetention)}, prefix + "b1": {"held", ttl(testLease)}} {
		resp, err := e.cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("%s: %v, %v", key, resp, err)
		}
		kv := resp.Kvs[0]
		lr, err := e.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil || string(kv.Value) != want.val || lr.GrantedTTL != want.ttl {
			t.Fatalf("%s: value %q lease granted %d (%v): want %q %d", key, kv.Value, lr.GrantedTTL, err, want.val, want.ttl)
		}
	}
	if n, err := e.Cleanup(ctx, prefix); err != nil || n == 0 {
		t.Fatalf("cleanup: %d, %v", n, err)
	}
}
