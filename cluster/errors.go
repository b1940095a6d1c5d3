package cluster

import "errors"

// Sentinel errors of the cluster package, compared with errors.Is. Callers
// get them wrapped with detail (%w). The gossip layer's are package
// gossip's.
var (
	// ErrNotCurrent: this node's map has not caught up with the control
	// leader's current one (or no leader answered): the node does not act
	// on it.
	ErrNotCurrent = errors.New("cluster: map not current")
)
