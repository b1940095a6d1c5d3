package gossip

import (
	"net"
	"testing"

	"github.com/l4xg/grid/cluster/topology"
)

// Hooks for the tests of package gossip_test.

// HostileStreams are TCP stream messages that make memberlist v0.5.4
// panic, by name.
func HostileStreams(t testing.TB) map[string][]byte { return attackStreams(t) }

// HostileAlivePacket is a UDP alive message for member id at its gossip
// address addr, with a newer incarnation and three protocol versions, which
// makes memberlist v0.5.4 panic.
func HostileAlivePacket(t testing.TB, id topology.NodeID, addr string) []byte {
	ip, port, err := splitIPPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return frame(t, mlAlive, mlAliveMsg{Incarnation: 1 << 20, Node: string(id), Addr: net.ParseIP(ip).To4(), Port: uint16(port), Vsn: []uint8{1, 5, 2}})
}
