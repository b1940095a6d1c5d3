package shard

import (
	"errors"
	"testing"

	"github.com/l4xg/grid/keyspace"
)

// The disk guard refuses only what makes new records, only below the
// reserve, and nothing when the room cannot be measured.
func TestDiskGuard(t *testing.T) {
	reserve := []keyspace.Command{{Op: keyspace.OpReserve}}
	settles := []keyspace.Command{{Op: keyspace.OpComplete}, {Op: keyspace.OpRelease}, {Op: keyspace.OpGet}}
	roomy := &diskGuard{dir: t.TempDir(), reserve: 1}
	if err := roomy.room(reserve); err != nil {
		t.Fatalf("a reserve of 1 byte: %v", err)
	}
	full := &diskGuard{dir: t.TempDir(), reserve: 1 << 62}
	if err := full.room(reserve); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("a reserve larger than any disk: %v, want ErrDiskFull", err)
	}
	if err := full.room(settles); err != nil {
		t.Fatalf("settles and reads below the reserve: %v", err)
	}
	unmeasured := &diskGuard{dir: "/no/such/dir", reserve: 1 << 62}
	if err := unmeasured.room(reserve); err != nil {
		t.Fatalf("a disk that cannot be measured: %v, want nothing refused", err)
	}
	if err := (&diskGuard{dir: t.TempDir(), reserve: -1}).room(reserve); err != nil {
		t.Fatalf("no reserve: %v", err)
	}
}
