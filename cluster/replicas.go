package cluster

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// replicaLoop keeps the local shard replicas in line with the map, on
// every node: it starts a replica of each shard whose set lists this node
// and stops (and deletes) a replica the map no longer gives it. It also
// retries every second, after a failed start or stop.
//
// Stopping is safe because the control leader commits a replica's removal
// from the map only after the shard's group has removed it from its Raft
// configuration (see Move): a node never drops a replica its group still
// counts on. A replica starts with a bootstrap only when the map gives the
// shard to this node alone, as for a new shard; otherwise it starts empty
// and waits for the shard's leader to add it.
func (n *Node) replicaLoop() {
	defer n.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		changed := n.ctl.Changed()
		if err := n.syncReplicas(); err != nil {
			n.cfg.Logger.Warn("replicas", "err", err)
		}
		select {
		case <-n.quit:
			return
		case <-changed:
		case <-t.C:
		}
	}
}

func (n *Node) syncReplicas() error {
	m := n.ctl.Map()
	if m == nil {
		return nil
	}
	host := n.cfg.Host
	set := host.Settings()
	var settingsErr error
	if m.Slots != set.Slots || m.Shards != set.Shards {
		settingsErr = fmt.Errorf("the cluster has %d slots and %d shards, this node's data directory %d and %d: hard settings must match (start this node with --slots %d --shards %d and an empty data directory)",
			m.Slots, m.Shards, set.Slots, set.Shards, m.Slots, m.Shards)
	}
	n.mu.Lock()
	prev := n.settingsErr
	n.settingsErr = settingsErr
	n.mu.Unlock()
	if settingsErr != nil {
		if prev == nil {
			return settingsErr
		}
		return nil
	}
	var errs []error
	for s, rs := range m.ShardReplicas {
		want := slices.Contains(rs, n.cfg.ID)
		switch {
		case want && host.Shard(s) == nil:
			alone := len(rs) == 1
			if _, err := host.StartReplica(s, alone); err != nil {
				errs = append(errs, fmt.Errorf("start replica of shard %d: %w", s, err))
			} else {
				n.cfg.Logger.Info("replica started", "shard", s, "bootstrap", alone, "epoch", m.Epoch)
			}
		case !want && host.Shard(s) != nil:
			if err := host.StopReplica(s, true); err != nil {
				errs = append(errs, fmt.Errorf("stop replica of shard %d: %w", s, err))
			} else {
				n.cfg.Logger.Info("replica removed", "shard", s, "epoch", m.Epoch)
			}
		}
	}
	return errors.Join(errs...)
}
