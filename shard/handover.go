package shard

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"
)

// PeerDisks is what a shard learns of its peers' disks: which of them
// gossip that their room is below their disk reserve
// (cluster.DiskStates).
type PeerDisks interface {
	// Full reports whether peer said, when last heard, that its disk is
	// below its reserve.
	Full(peer string) bool
}

// DiskRefused tells the replica that its node refused one of the shard's
// new keys for a full disk (Host.DiskRoom): a leader then hands its
// leadership to a voter with room at once, instead of at its next tick.
// It does not block.
func (s *Replica) DiskRefused() {
	select {
	case s.diskNudge <- struct{}{}:
	default:
	}
}

// diskHandOver hands the leadership over when this node's disk is below
// its reserve (Config.DiskFull) and a voter has room (handOverForDisk),
// and reports whether it moved.
func (s *Replica) diskHandOver() bool {
	if s.cfg.DiskFull == nil {
		return false
	}
	why := s.cfg.DiskFull()
	return why != nil && s.handOverForDisk(why)
}

// handOverForDisk gives the leadership to a voter whose node has room for
// new keys, when this leader's node has not (why: Config.DiskFull): a
// leader that refuses every Reserve stops the whole shard's new keys,
// while a voter with room would take them. The voter is one of
// fitVoters. Without such a voter it stays; the reserve it keeps is there
// for settles, reads and Raft's own writes. It reports whether the
// leadership moved. Best effort: the next tick tries again.
func (s *Replica) handOverForDisk(why error) bool {
	fit, _ := s.fitVoters()
	if len(fit) == 0 {
		return false
	}
	return s.handOverTo(fit[0], "this node's disk is below its reserve", why)
}

// fitVoters returns the group's other voters that may lead it well: not
// known to be full (PeerDisks: a full leader refuses every new key) nor
// measured outside the clock bound of this node (it would grant no lease
// and hand the leadership back), in the configuration's order; and how
// many other voters there are in all.
func (s *Replica) fitVoters() (fit []raft.Server, others int) {
	cf := s.raft.GetConfiguration()
	if cf.Error() != nil {
		return nil, 0
	}
	for _, srv := range cf.Configuration().Servers {
		id := string(srv.ID)
		if srv.Suffrage != raft.Voter || id == s.cfg.NodeID {
			continue
		}
		others++
		if s.cfg.PeerDisks != nil && s.cfg.PeerDisks.Full(id) {
			continue
		}
		if s.cfg.PeerClocks != nil {
			if off, ok := s.cfg.PeerClocks.Offset(id); ok && off.Abs() > s.cfg.MaxClockOffset {
				continue
			}
		}
		fit = append(fit, srv)
	}
	return fit, others
}

// handOverTo transfers the leadership to target, for the reason given
// (what, and the error why), and reports whether it moved.
func (s *Replica) handOverTo(target raft.Server, what string, why error) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.cfg.HeartbeatTimeout)
	defer cancel()
	err := s.TransferLeadership(ctx, string(target.ID), string(target.Address))
	switch {
	case err == nil:
		s.cfg.Logger.Warn("leadership handed over: "+what, "shard", s.cfg.ID, "to", target.ID, "why", why)
		return true
	case !errors.Is(err, ErrNotLeader):
		s.cfg.Logger.Info("leadership hand-over failed", "shard", s.cfg.ID, "to", target.ID, "reason", what, "err", err)
	}
	return false
}
