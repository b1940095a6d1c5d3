package cluster

import "errors"

// Sentinel errors of the cluster package, compared with errors.Is. Callers
// get them wrapped with detail (%w).
var (
	// ErrConfig: a config struct failed Validate.
	ErrConfig = errors.New("cluster: invalid config")
	// ErrMeta: gossiped node metadata does not decode or does not fit.
	ErrMeta = errors.New("cluster: bad node metadata")
	// ErrNotStarted: the membership was used before Start.
	ErrNotStarted = errors.New("cluster: membership not started")
	// ErrShutdown: the membership was shut down.
	ErrShutdown = errors.New("cluster: membership shut down")
	// ErrJoin: no given address could be reached.
	ErrJoin = errors.New("cluster: join failed")
	// ErrCorrupt: bytes that are not a valid encoding (map, command,
	// snapshot).
	ErrCorrupt = errors.New("cluster: corrupt encoding")
	// ErrInvalidMap: a cluster map breaks an invariant of Map.Validate.
	ErrInvalidMap = errors.New("cluster: invalid cluster map")
	// ErrRejected: a control command is well formed but does not apply to
	// the current map (unknown node, stale move, bootstrap twice). The map
	// is unchanged and its epoch not bumped.
	ErrRejected = errors.New("cluster: control command rejected")
	// ErrUnderReplicated: a drain would leave fewer active nodes than the
	// map's replica count, so shards would run with fewer replicas. It
	// comes wrapped with ErrRejected; force the drain to go ahead.
	ErrUnderReplicated = errors.New("cluster: drain would under-replicate")
	// ErrNotCurrent: this node's map has not caught up with the control
	// leader's current one (or no leader answered): the node does not act
	// on it.
	ErrNotCurrent = errors.New("cluster: map not current")
)
