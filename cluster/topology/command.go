package topology

import (
	"encoding/binary"
	"fmt"
)

// CommandType is the type byte of a control command.
//
// Unknown-type rule: every command changes the cluster map, so a type this
// binary does not know means the log was written by a newer binary whose
// effect it cannot reproduce; the control FSM panics rather than diverge
// from the other voters (the consul way). New types take the next value;
// an existing type's payload never changes meaning (bump commandVersion
// instead).
type CommandType uint8

const (
	// CmdBootstrap installs the first map (epoch 1). Once only.
	CmdBootstrap CommandType = iota + 1
	// CmdNodeJoin adds a node as active, or updates the addresses of a
	// known one. A removed node becomes active again only with a new
	// incarnation (a wiped data directory); with the one it was removed
	// under it is rejected.
	CmdNodeJoin
	// CmdNodeDrain marks a node draining: the planner moves its replicas
	// away and it receives none.
	CmdNodeDrain
	// CmdNodeRemove marks a node that holds no replica removed.
	CmdNodeRemove
	// CmdApplyMove applies a Move (or one half of it) to a replica set.
	CmdApplyMove
	// CmdSetLeaderHint records which replica leads a shard, for routing.
	CmdSetLeaderHint
)

var commandNames = [...]string{"", "bootstrap", "node-join", "node-drain", "node-remove", "apply-move", "set-leader-hint"}

func (t CommandType) String() string {
	if t >= CmdBootstrap && t <= CmdSetLeaderHint {
		return commandNames[t]
	}
	return fmt.Sprintf("command(%d)", uint8(t))
}

// Command is one control command; which fields count depends on Type.
type Command struct {
	Type  CommandType
	Map   *Map     // Bootstrap
	Node  NodeInfo // NodeJoin (State is ignored)
	ID    NodeID   // NodeDrain, NodeRemove, SetLeaderHint ("" = unknown leader)
	Move  Move     // ApplyMove
	Shard int      // SetLeaderHint
}

// commandVersion 2: version byte, type byte, then the type's payload.
// Version 2 changed one payload: NodeJoin's NodeInfo carries the node's
// incarnation. Version 1 entries (older logs) still decode, with none.
const commandVersion = 2

// MarshalBinary encodes c for the control log.
func (c Command) MarshalBinary() ([]byte, error) {
	b := []byte{commandVersion, byte(c.Type)}
	switch c.Type {
	case CmdBootstrap:
		if c.Map == nil {
			return nil, fmt.Errorf("%w: bootstrap without a map", ErrInvalidMap)
		}
		if err := c.Map.Validate(); err != nil {
			return nil, err
		}
		return c.Map.appendTo(b), nil
	case CmdNodeJoin:
		return appendNodeInfo(b, c.Node), nil
	case CmdNodeDrain, CmdNodeRemove:
		return appendString(b, string(c.ID)), nil
	case CmdApplyMove:
		b = binary.AppendUvarint(b, uint64(c.Move.Shard))
		b = appendString(b, string(c.Move.Add))
		b = appendString(b, string(c.Move.Remove))
		return appendString(b, string(c.Move.Leader)), nil
	case CmdSetLeaderHint:
		b = binary.AppendUvarint(b, uint64(c.Shard))
		return appendString(b, string(c.ID)), nil
	}
	return nil, fmt.Errorf("cluster: cannot encode %v", c.Type)
}

// DecodeCommand decodes a control command. Errors wrap ErrCorrupt (or
// ErrInvalidMap for a bootstrap map that breaks an invariant).
func DecodeCommand(b []byte) (Command, error) {
	r := &reader{b: b}
	v := r.byte()
	if r.err == nil && (v < 1 || v > commandVersion) {
		r.fail("command version %d, this binary reads 1..%d", v, commandVersion)
	}
	c := Command{Type: CommandType(r.byte())}
	if r.err != nil {
		return Command{}, r.err
	}
	switch c.Type {
	case CmdBootstrap:
		m, err := readMap(r)
		if err != nil {
			return Command{}, err
		}
		c.Map = m
	case CmdNodeJoin:
		c.Node = readNodeInfo(r, v >= 2)
	case CmdNodeDrain, CmdNodeRemove:
		c.ID = NodeID(r.string())
	case CmdApplyMove:
		c.Move.Shard = int(r.uvarint(MaxShards))
		c.Move.Add, c.Move.Remove, c.Move.Leader = NodeID(r.string()), NodeID(r.string()), NodeID(r.string())
	case CmdSetLeaderHint:
		c.Shard = int(r.uvarint(MaxShards))
		c.ID = NodeID(r.string())
	default:
		r.fail("unknown control command type %d", uint8(c.Type))
	}
	if err := r.done(); err != nil {
		return Command{}, err
	}
	return c, nil
}
