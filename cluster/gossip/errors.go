package gossip

import "errors"

// Sentinel errors of the gossip package, compared with errors.Is. Callers
// get them wrapped with detail (%w). ErrFrame is with the frame checks.
var (
	// ErrNotStarted: the membership was used before Start.
	ErrNotStarted = errors.New("gossip: membership not started")
	// ErrShutdown: the membership was shut down.
	ErrShutdown = errors.New("gossip: membership shut down")
	// ErrJoin: no given address could be reached.
	ErrJoin = errors.New("gossip: join failed")
)
