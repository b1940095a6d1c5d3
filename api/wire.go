package api

import (
	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/keyspace"
)

// Command is the state machine's command for one wire operation, as the
// service makes it: defaults filled in, limits checked. read reports a Get,
// which the service answers by a read (keyspace.Machine.Get) rather than
// through the log. An invalid operation returns the gRPC status error the
// service answers it with. With Answer, it lets a test double of the grid
// run a real keyspace.Machine behind the same wire rules.
func Command(op *gridpb.Op) (cmd keyspace.Command, read bool, err error) {
	t, err := opTarget(op)
	if err != nil {
		return keyspace.Command{}, false, toStatus(err)
	}
	return t.cmd, t.read, nil
}

// Answer renders a state machine result on the wire, as the service
// answers it.
func Answer(r *keyspace.Result) *gridpb.OpResult { return toProto(r) }
