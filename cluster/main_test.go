package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// hashicorp/raft's in-memory transport leaves a goroutine behind
		// after Close (as in package shard).
		goleak.IgnoreAnyFunction("github.com/hashicorp/raft.(*InmemTransport).Close"),
	)
}
