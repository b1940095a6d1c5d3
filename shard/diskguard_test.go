package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/keyspace"
)

// The disk guard refuses only what makes new records, only below the
// reserve, and nothing when the room cannot be measured.
func TestDiskGuard(t *testing.T) {
	reserve := []keyspace.Command{{Op: keyspace.OpReserve}}
	settles := []keyspace.Command{{Op: keyspace.OpComplete}, {Op: keyspace.OpRelease}, {Op: keyspace.OpGet}}
	roomy := newDiskGuard(t.TempDir(), 1)
	if err := roomy.room(reserve); err != nil {
		t.Fatalf("a reserve of 1 byte: %v", err)
	}
	full := newDiskGuard(t.TempDir(), 1<<62)
	if err := full.room(reserve); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("a reserve larger than any disk: %v, want ErrDiskFull", err)
	}
	if err := full.room(settles); err != nil {
		t.Fatalf("settles and reads below the reserve: %v", err)
	}
	if err := full.full(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("full below the reserve: %v, want ErrDiskFull", err)
	}
	if err := roomy.full(); err != nil {
		t.Fatalf("full above the reserve: %v", err)
	}
	unmeasured := newDiskGuard("/no/such/dir", 1<<62)
	if err := unmeasured.room(reserve); err != nil {
		t.Fatalf("a disk that cannot be measured: %v, want nothing refused", err)
	}
	if err := newDiskGuard(t.TempDir(), -1).room(reserve); err != nil {
		t.Fatalf("no reserve: %v", err)
	}
}

// stubDisks is a PeerDisks whose answers the test sets.
type stubDisks struct {
	mu   sync.Mutex
	full map[string]bool
}

func (d *stubDisks) Full(peer string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.full[peer]
}

func (d *stubDisks) set(full ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.full = map[string]bool{}
	for _, id := range full {
		d.full[id] = true
	}
}

// TestFullDiskHandsLeadershipOver: a leader on a node whose disk is below
// its reserve (n0's reserve is larger than any disk) hands its leadership
// to a voter its peers' gossip does not call full (n2, not n1), and a
// leader with no such voter keeps it.
func TestFullDiskHandsLeadershipOver(t *testing.T) {
	disks := &stubDisks{}
	disks.set("n0", "n1")
	nh := tunedNetHosts(t, 3, false, func(c *HostConfig) {
		c.TickInterval = 20 * time.Millisecond
		c.PeerDisks = disks
		if c.NodeID == "n0" {
			c.DiskReserve = 1 << 62
		}
	})
	const id = 0
	if at, l := nh.leader(id); at != 0 {
		// n0 leads once, unless it did already (and may have handed over).
		if err := l.TransferLeadership(context.Background(), "n0", nh.addrs[0]); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, 20*time.Second, "the leadership to go from the full n0 to n2", func() bool {
		at, _ := nh.leader(id)
		return at == 2
	})
	// With every peer full, a full leader stays.
	disks.set("n0", "n1", "n2")
	if nh.replica(2, id).handOverForDisk(fmt.Errorf("%w: n2's, as gossiped", ErrDiskFull)) {
		t.Fatal("n2 handed its leadership over though every voter's disk is full")
	}
	if at, _ := nh.leader(id); at != 2 {
		t.Fatalf("leader of shard %d is n%d, want n2", id, at)
	}
}

// TestDiskRefusalHandsLeadershipOverAtOnce: a leader whose disk fills
// while it leads hands its leadership over as soon as its node refuses one
// of the shard's new keys (DiskRefused), not at its next tick (an hour
// away here).
func TestDiskRefusalHandsLeadershipOverAtOnce(t *testing.T) {
	disks := &stubDisks{}
	nh := tunedNetHosts(t, 3, false, func(c *HostConfig) {
		c.TickInterval = time.Hour
		c.PeerDisks = disks
	})
	const id = 0
	at, l := nh.leader(id)
	nh.hosts[at].disk.reserve.Store(1 << 62) // its disk fills
	disks.set(string(nh.peers[at].ID))
	reserve := []keyspace.Command{{Op: keyspace.OpReserve}}
	if err := nh.hosts[at].DiskRoom(reserve); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("a new key on the full node: %v, want ErrDiskFull", err)
	}
	l.DiskRefused()
	testwait.For(t, 20*time.Second, "the leadership to leave the full node", func() bool {
		next, _ := nh.leader(id)
		return next != at
	})
}

// TestCloseHandsLeadershipToAVoterWithRoom: a leader that closes (its node
// stopping) hands its leadership to a voter that gossip does not call
// full, where Raft alone picks the first voter as caught up as the other
// (here the full n1).
func TestCloseHandsLeadershipToAVoterWithRoom(t *testing.T) {
	disks := &stubDisks{}
	disks.set("n1")
	nh := tunedNetHosts(t, 3, false, func(c *HostConfig) { c.PeerDisks = disks })
	const id = 0
	if at, l := nh.leader(id); at != 0 {
		if err := l.TransferLeadership(context.Background(), "n0", nh.addrs[0]); err != nil {
			t.Fatal(err)
		}
	}
	if at, _ := nh.leader(id); at != 0 {
		t.Fatalf("leader of shard %d is n%d after a transfer to n0", id, at)
	}
	nh.stop(0)
	if at, _ := nh.leader(id); at != 2 {
		t.Fatalf("n0 closed and handed shard %d to n%d, want n2 (n1's disk is full)", id, at)
	}
}
