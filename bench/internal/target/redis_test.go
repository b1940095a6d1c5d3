package target

import (
	"context"
	"testing"
	"time"
)

const testRedisAddr = "127.0.0.1:6379"

func startRedis(t *testing.T) (*Redis, string) {
	t.Helper()
	ctx := context.Background()
	r, err := NewRedis(ctx, testRedisAddr, 8)
	if err != nil {
		t.Skipf("no Redis at %s: %v", testRedisAddr, err)
	}
	prefix := testPrefix()
	t.Cleanup(func() {
		if _, err := r.Cleanup(ctx, prefix); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		r.Close()
	})
	return r, prefix
}

func TestRedisContract(t *testing.T) {
	r, prefix := startRedis(t)
	contract(t, r, prefix)
}

// Reserve is SET NX with the lease as TTL; Complete rewrites it with the
// retention as TTL.
func TestRedisCommandsAndTTLs(t *testing.T) {
	r, prefix := startRedis(t)
	ctx := context.Background()
	key := prefix + "ttl"
	res, err := r.Reserve(ctx, key, testLease)
	if err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if ttl := r.rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > testLease {
		t.Fatalf("reserved key PTTL %v, want in (0, %v]", ttl, testLease)
	}
	if err := r.Complete(ctx, res, testRetention); err != nil {
		t.Fatal(err)
	}
	if v := r.rdb.Get(ctx, key).Val(); v != "completed" {
		t.Fatalf("completed key holds %q", v)
	}
	if ttl := r.rdb.PTTL(ctx, key).Val(); ttl <= testLease || ttl > testRetention {
		t.Fatalf("completed key PTTL %v, want the retention", ttl)
	}
	// Complete of an expired key is a lost lease, not a silent re-create.
	gone := prefix + "gone"
	if err := r.Complete(ctx, res2(gone), testRetention); err == nil {
		t.Fatal("complete of a missing key succeeded")
	}
	if n := r.rdb.Exists(ctx, gone).Val(); n != 0 {
		t.Fatal("complete created a missing key")
	}
}

func TestRedisCleanupRemovesOnlyThePrefix(t *testing.T) {
	r, prefix := startRedis(t)
	ctx := context.Background()
	other := testPrefix()
	defer r.Cleanup(ctx, other)
	for _, k := range []string{prefix + "a", prefix + "b", other + "c"} {
		if _, err := r.Reserve(ctx, k, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	n, err := r.Cleanup(ctx, prefix)
	if err != nil || n != 2 {
		t.Fatalf("cleanup removed %d, %v: want 2", n, err)
	}
	if r.rdb.Exists(ctx, other+"c").Val() != 1 {
		t.Fatal("cleanup removed a key of another prefix")
	}
	if _, err := r.Cleanup(ctx, "x*"); err == nil {
		t.Fatal("cleanup accepted a pattern")
	}
}
