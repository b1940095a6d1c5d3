package cluster

import "errors"

// Sentinel errors of the cluster package, compared with errors.Is. Callers
// get them wrapped with detail (%w).
var (
	// ErrNotStarted: the membership was used before Start.
	ErrNotStarted = errors.New("cluster: membership not started")
	// ErrShutdown: the membership was shut down.
	ErrShutdown = errors.New("cluster: membership shut down")
	// ErrJoin: no given address could be reached.
	ErrJoin = errors.New("cluster: join failed")
	// ErrNotCurrent: this node's map has not caught up with the control
	// leader's current one (or no leader answered): the node does not act
	// on it.
	ErrNotCurrent = errors.New("cluster: map not current")
)
