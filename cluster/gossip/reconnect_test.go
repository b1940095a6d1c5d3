package gossip

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/testwait"
)

func TestReconnectTargets(t *testing.T) {
	now := time.Unix(1000, 0)
	alive := func(id topology.NodeID, addr string) Member { return Member{ID: id, Addr: addr, State: MemberAlive} }
	dead := func(id topology.NodeID, addr string, ago time.Duration) Member {
		return Member{ID: id, Addr: addr, State: MemberDead, Since: now.Add(-ago)}
	}
	left := Member{ID: "l", Addr: "10.0.0.9:1", State: MemberLeft}
	self := alive("s", "10.0.0.1:1")
	seeds := []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.7:1"}
	for _, tc := range []struct {
		name    string
		members []Member
		want    []string
	}{
		{"alone: the seeds but self", []Member{self}, []string{"10.0.0.2:1", "10.0.0.7:1"}},
		{"all alive: nothing", []Member{self, alive("b", "10.0.0.2:1")}, nil},
		{"a left member is not called back", []Member{self, alive("b", "10.0.0.2:1"), left}, nil},
		{"a dead member, then the seeds not alive", []Member{self, alive("b", "10.0.0.2:1"), dead("c", "10.0.0.3:1", time.Minute)},
			[]string{"10.0.0.3:1", "10.0.0.7:1"}},
		{"given up after the timeout", []Member{self, alive("b", "10.0.0.2:1"), dead("c", "10.0.0.3:1", 2*time.Hour)}, nil},
		{"a dead seed once", []Member{self, dead("b", "10.0.0.2:1", time.Second)}, []string{"10.0.0.2:1", "10.0.0.7:1"}},
		{"at most three a round", []Member{self, alive("b", "10.0.0.2:1"), dead("c", "10.0.0.3:1", 0),
			dead("d", "10.0.0.4:1", 0), dead("e", "10.0.0.5:1", 0), dead("f", "10.0.0.6:1", 0)},
			[]string{"10.0.0.3:1", "10.0.0.4:1", "10.0.0.5:1"}},
	} {
		got := reconnectTargets("s", self.Addr, tc.members, seeds, now, time.Hour, func([]string) {})
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// partitionGossip cuts the members of side from the others, both ways.
func partitionGossip(side, rest []*Membership) {
	for _, a := range side {
		for _, b := range rest {
			a.cfg.Faults.Block(b.Addr())
			b.cfg.Faults.Block(a.Addr())
		}
	}
}

// TestGossipHealsAfterPartition (defect 8): a is cut from b and c until
// each side has declared the other dead; after the heal every member sees
// every other alive again. memberlist alone never contacts the dead, so
// this holds only because Membership rejoins them.
func TestGossipHealsAfterPartition(t *testing.T) {
	for _, udpStaysCut := range []bool{false, true} {
		name := "full heal"
		if udpStaysCut {
			name = "TCP heals, UDP stays cut"
		}
		t.Run(name, func(t *testing.T) {
			var alog syncBuffer
			a := gossipNode(t, "a", nil, &Faults{}, &alog)
			b := gossipNode(t, "b", []string{a.Addr()}, &Faults{})
			c := gossipNode(t, "c", []string{a.Addr()}, &Faults{})
			all := []*Membership{a, b, c}
			testwait.For(t, 10*time.Second, "a, b and c meet", func() bool { return allAlive(all...) })

			partitionGossip([]*Membership{a}, []*Membership{b, c})
			testwait.For(t, 10*time.Second, "each side sees the other dead", func() bool {
				mb, _ := state(a, "b")
				mc, _ := state(a, "c")
				ma, _ := state(b, "a")
				ma2, _ := state(c, "a")
				return mb.State == MemberDead && mc.State == MemberDead && ma.State == MemberDead && ma2.State == MemberDead
			})
			// Hold the partition until the broadcasts of the deaths have
			// gone out (each is sent a few times): a heal within that
			// window heals through them, a longer partition cannot.
			marks := make([]uint64, len(all))
			for i, m := range all {
				marks[i] = m.drains.Load()
			}
			testwait.For(t, 10*time.Second, "100 more broadcast drains everywhere", func() bool {
				for i, m := range all {
					if m.drains.Load() < marks[i]+100 {
						return false
					}
				}
				return true
			})
			for _, m := range all {
				m.cfg.Faults.Heal()
			}
			if udpStaysCut {
				for _, p := range []*Membership{b, c} {
					a.cfg.Faults.BlockPackets(p.Addr())
					p.cfg.Faults.BlockPackets(a.Addr())
				}
			}
			healed, logAtHeal := time.Now(), len(alog.String())
			testwait.For(t, 10*time.Second, "every member sees every other alive", func() bool { return allAlive(all...) })
			t.Logf("all alive %v after the heal", time.Since(healed).Round(time.Millisecond))
			if udpStaysCut {
				// a's probes now fail over UDP and pass over TCP; that
				// must not make it declare its peers failed. (A probe that
				// also misses its TCP deadline on a loaded machine may
				// make a peer suspect for a moment, which the peer
				// refutes: the test asserts no failure, not no suspicion.)
				testwait.For(t, 10*time.Second, "a probes over TCP", func() bool {
					return strings.Contains(alog.String(), "over TCP but UDP probes failed")
				})
				testwait.For(t, 10*time.Second, "every member alive after probes over TCP", func() bool { return allAlive(all...) })
				if after := alog.String()[logAtHeal:]; strings.Contains(after, "as failed") {
					t.Fatalf("a declared a peer failed while it answered over TCP:\n%s", after)
				}
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
