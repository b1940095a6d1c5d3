package cluster

import (
	"errors"
	"sync"
	"time"

	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/shard"
)

// DiskStates is what a node knows of its cluster's disks: which nodes'
// data directories are below their disk reserve (shard.Host.DiskFull),
// where they take no new keys, as each gossips it
// (gossip.Membership.SetDiskFull); the node's own is what it last
// gossiped. A shard leader on a full node hands its leadership to a voter
// not known to be full (shard.Config.PeerDisks); the control leader reads
// a node's own Status instead before it hands a leadership back
// (handBack). Its methods are safe for concurrent use.
type DiskStates struct {
	mu   sync.Mutex
	full map[topology.NodeID]bool
}

var _ shard.PeerDisks = (*DiskStates)(nil)

// NewDiskStates returns a DiskStates that knows of no full disk.
func NewDiskStates() *DiskStates { return &DiskStates{full: map[topology.NodeID]bool{}} }

// Full reports whether node said, when last heard, that its disk is below
// its reserve.
func (d *DiskStates) Full(node string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.full[topology.NodeID(node)]
}

// observe takes a member's gossiped state; a member gone is forgotten.
func (d *DiskStates) observe(m gossip.Member) {
	d.set(m.ID, m.State == gossip.MemberAlive && m.DiskFull)
}

func (d *DiskStates) set(node topology.NodeID, full bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if full {
		d.full[node] = true
	} else {
		delete(d.full, node)
	}
}

// diskWatch is how often a node looks at its own disk's room to gossip
// it (the host's disk guard measures at most every 250 ms).
const diskWatch = 500 * time.Millisecond

// watchDisk gossips this node's disk state whenever it changes: below the
// reserve or not (shard.Host.DiskFull).
func (n *Runtime) watchDisk() {
	defer n.wg.Done()
	t := time.NewTicker(diskWatch)
	defer t.Stop()
	gossiped := false
	for {
		select {
		case <-n.quit:
			return
		case <-t.C:
		}
		why := n.cfg.Host.DiskFull()
		full := why != nil
		if full == gossiped {
			continue
		}
		n.disks.set(n.cfg.ID, full)
		if err := n.ms.SetDiskFull(full, n.cfg.HeartbeatTimeout); err != nil {
			if !errors.Is(err, gossip.ErrShutdown) {
				n.cfg.Logger.Info("gossip of the disk state failed: the next look tries again", "full", full, "err", err)
			}
			continue
		}
		gossiped = full
		if full {
			n.cfg.Logger.Warn("disk below its reserve: this node takes no new keys, and its shard leaders hand their leadership to nodes with room", "why", why)
		} else {
			n.cfg.Logger.Info("disk above its reserve again: this node takes new keys")
		}
	}
}
