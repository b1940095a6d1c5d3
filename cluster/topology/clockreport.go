package topology

import (
	"time"
)

// PeerClock is the latest estimate of one peer's clock offset.
type PeerClock struct {
	ID NodeID
	// Offset is the peer's clock minus this node's; Uncertainty bounds
	// its error (half the ping's round trip).
	Offset, Uncertainty time.Duration
	// Age is how long ago it was measured.
	Age time.Duration
	// Outside reports |Offset| - Uncertainty > the maximum offset: beyond
	// the bound whatever the estimate's error. Within reports |Offset| +
	// Uncertainty <= the maximum offset: inside it whatever the error. An
	// estimate too uncertain to tell is neither.
	Outside, Within bool
}

// ClockReport is this node's clock as measured against its peers.
type ClockReport struct {
	MaxOffset time.Duration
	// Offset is the median of Peers' offsets (0 with none): positive when
	// the peers' clocks are ahead of this node's.
	Offset time.Duration
	// Peers are the estimates within the window, by id.
	Peers []PeerClock
	// Known counts the peers this node knows, measured within the window
	// or not (those that left or died are forgotten).
	Known int
	// Outside counts the peers of Peers beyond the bound. OK is false
	// when they are more than half of Known, true when those within it are
	// at least half of Known, and otherwise what it was.
	Outside int
	OK      bool
}
