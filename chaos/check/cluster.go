package check

// Cluster is what the linearizability test needs from a grid under test:
// the client addresses of its nodes and the faults it can inject. Node
// indexes are 0..len(Addrs())-1. Methods report failures through the test
// (t.Fatal), so they return nothing.
//
// A single in-process node (the test's adapter over internal/gridtest)
// implements it now; the in-process cluster harness of issue 3 implements
// it next, and Partitioner too.
type Cluster interface {
	// Addrs are the client (gRPC) addresses, one per node.
	Addrs() []string
	// Kill stops node i abruptly: calls in flight are cut, answers lost.
	// The node stays down until Restart.
	Kill(i int)
	// Restart stops node i (cleanly, if it is running) and starts it again
	// on the same data and addresses; it returns once the node serves.
	Restart(i int)
}

// Partitioner is a Cluster whose network can be cut. The test uses it when
// the Cluster has it.
type Partitioner interface {
	// Partition cuts the nodes into groups that cannot reach one another;
	// nodes not named are isolated alone.
	Partition(groups ...[]int)
	// Heal restores every link.
	Heal()
}
