package cluster

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/cluster/topology"
)

// bootstrapLoop bootstraps the control group once this node is one of
// the first BootstrapExpect met through gossip (gossip.Membership joins
// the Join addresses, and rejoins, by itself).
func (n *Runtime) bootstrapLoop() {
	defer n.wg.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		done, err := n.tryBootstrap()
		if err != nil {
			n.cfg.Logger.Warn("bootstrap", "err", err)
		}
		if done {
			return
		}
		select {
		case <-n.quit:
			return
		case <-t.C:
		}
	}
}

// tryBootstrap forms the control group once BootstrapExpect nodes are
// alive in gossip: the first min(3, N) of them by id are its voters
// (1 voter for fewer than 3 nodes), and each of those bootstraps the group
// with that same configuration, which Raft accepts from every voter. It
// reports done when there is nothing left to do: the group has state
// already, or this node does not bootstrap.
func (n *Runtime) tryBootstrap() (bool, error) {
	if n.cfg.BootstrapExpect == 0 {
		return true, nil
	}
	has, err := raft.HasExistingState(n.store, n.store, n.snaps)
	if err != nil || has {
		return true, err
	}
	var ready []gossip.Member
	for _, m := range n.ms.Members() {
		if m.State == gossip.MemberAlive && m.MetaErr == nil && m.Meta.RaftAddr != "" {
			ready = append(ready, m)
		}
	}
	if len(ready) < n.cfg.BootstrapExpect {
		return false, nil
	}
	ready = ready[:n.cfg.BootstrapExpect] // sorted by id
	voters := ready[:topology.ControlVoters(len(ready))]
	var conf raft.Configuration
	self := false
	for _, m := range voters {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.Meta.RaftAddr)})
		self = self || m.ID == n.cfg.ID
	}
	if !self {
		return true, nil // a voter adds this node
	}
	n.cfg.Logger.Info("bootstrapping the control group", "voters", len(conf.Servers))
	if err := n.raft.BootstrapCluster(conf).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return false, err
	}
	return true, nil
}
