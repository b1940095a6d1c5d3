package topology

import "errors"

// Sentinel errors of the cluster state, compared with errors.Is. Callers
// get them wrapped with detail (%w).
var (
	// ErrConfig: a config struct failed Validate.
	ErrConfig = errors.New("cluster: invalid config")
	// ErrMeta: gossiped node metadata does not decode or does not fit.
	ErrMeta = errors.New("cluster: bad node metadata")
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
)
