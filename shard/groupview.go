package shard

import (
	"cmp"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// A replica's suffrage in its group's configuration as it knows it.
const (
	SuffrageVoter    = "voter"
	SuffrageNonvoter = "nonvoter"
	SuffrageNone     = "none" // not a member: not added yet, or removed
)

// configScanLimit bounds how many log entries groupView reads back from
// the last one to find the index of a configuration not applied yet.
const configScanLimit = 1024

// GroupView is a replica's view of its group.
type GroupView struct {
	// Group is the latest configuration this replica has (on the leader
	// it may not be committed yet), sorted by server id.
	Group []raft.Server
	// ConfigIndex is the log index of Group's configuration entry, 0 when
	// unknown (a configuration not applied yet that lies further back
	// than configScanLimit entries from the end of the log).
	// ConfigCommitted reports ConfigIndex <= CommitIndex: on the group's
	// leader, a committed Group is the group's truth. A configuration this
	// replica has already applied is reported committed at the index where
	// it applied it.
	ConfigIndex     uint64
	ConfigCommitted bool
	// Suffrage is this replica's standing in Group: SuffrageVoter,
	// SuffrageNonvoter or SuffrageNone.
	Suffrage string
	// LastContact is how long ago this replica last heard from its
	// leader: 0 on the leader, negative when never.
	LastContact time.Duration
}

// groupView describes the group as this replica knows it; commit is its
// commit index.
func (s *Replica) groupView(commit uint64) GroupView {
	// The applied configuration first: one applied meanwhile is then
	// either in latest too or found by the scan.
	applied := s.fsm.config()
	cf := s.raft.GetConfiguration().Configuration()
	latest := cf.Clone().Servers
	slices.SortFunc(latest, func(a, b raft.Server) int { return cmp.Compare(a.ID, b.ID) })
	v := GroupView{Group: latest, Suffrage: SuffrageNone}
	if srv, ok := findServer(latest, s.cfg.NodeID); ok {
		v.Suffrage = SuffrageNonvoter
		if srv.Suffrage == raft.Voter {
			v.Suffrage = SuffrageVoter
		}
	}
	switch {
	case applied != nil && sameServers(applied.servers, latest):
		v.ConfigIndex, v.ConfigCommitted = applied.index, true
	case len(latest) > 0:
		floor := uint64(0)
		if applied != nil {
			floor = applied.index
		}
		v.ConfigIndex = s.configIndexAfter(floor)
		v.ConfigCommitted = v.ConfigIndex != 0 && v.ConfigIndex <= commit
	}
	switch lc := s.raft.LastContact(); {
	case s.raft.State() == raft.Leader:
		v.LastContact = 0
	case lc.IsZero():
		v.LastContact = -1
	default:
		v.LastContact = max(time.Since(lc), time.Nanosecond)
	}
	return v
}

// configIndexAfter returns the index of the last configuration entry in
// the log after index floor, reading back at most configScanLimit entries
// from the last one; 0 when it finds none.
func (s *Replica) configIndexAfter(floor uint64) uint64 {
	last := s.raft.LastIndex()
	var l raft.Log
	for i := last; i > floor && last-i < configScanLimit; i-- {
		if err := s.logs.GetLog(i, &l); err != nil {
			return 0 // compacted under us, or closing
		}
		if l.Type == raft.LogConfiguration {
			return i
		}
	}
	return 0
}

// sameServers reports whether a and b list the same servers with the same
// suffrage and address, in any order.
func sameServers(a, b []raft.Server) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		y, ok := findServer(b, string(x.ID))
		if !ok || y != x {
			return false
		}
	}
	return true
}

// latestSnapshotConfig is the configuration (and its index) recorded in
// the newest snapshot of snaps.
func latestSnapshotConfig(snaps raft.SnapshotStore) (uint64, raft.Configuration, bool) {
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 {
		return 0, raft.Configuration{}, false
	}
	return metas[0].ConfigurationIndex, metas[0].Configuration, true
}
