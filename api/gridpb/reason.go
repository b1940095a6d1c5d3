package gridpb

// The values of Redirect.reason that the server sends and the client reads:
// each names why a node refused an operation without applying it, when it
// is not a plain "this node does not lead the shard" (reason empty). Every
// one of them proves that nothing was applied.
const (
	// ReasonStarting: the node has no cluster map yet (it is starting or
	// restarting and has not caught up), so it can neither serve nor
	// forward. The Redirect names no shard leader.
	ReasonStarting = "starting"
	// ReasonNotMember: the node is not (or not yet) a member of the
	// cluster map, holds no replica of the shard and cannot forward the
	// operation. The Redirect names the shard's leader as the node knows it.
	ReasonNotMember = "not a member"
	// ReasonRemoved: the cluster map says the node was removed: it must
	// not serve. The Redirect names no shard leader.
	ReasonRemoved = "removed"
)
