package gossip

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/l4xg/grid/cluster/topology"
)

// Healing. memberlist v0.5.4 never contacts a member it has declared dead:
// it probes and pushes state only to live ones. After a partition each
// side has declared the other dead, so nothing flows again and the views
// stay split for good. Membership therefore rejoins, as Consul's
// retry-join and serf's reconnect of failed members do: while a known
// member is not alive, it joins (a TCP push/pull of the whole state) dead
// members and the seeds, a few a round.
//
// A push/pull merges both views. A member that finds itself dead in the
// other's state refutes it with a higher incarnation; the other adopts
// that on the next push/pull, so a pair heals within two rounds even when
// its UDP path stays broken (memberlist's "was able to connect over TCP but
// UDP probes failed": its probes then succeed through their TCP fallback,
// and the periodic push/pull carries the state that UDP gossip would).

const (
	// reconnectPerRound bounds the joins of one round; each may take up
	// to the TCP timeout against an unreachable address.
	reconnectPerRound = 3
	// joinRetry is the pace of the first join, until one succeeds.
	joinRetry = 200 * time.Millisecond
)

// reconnectTargets returns the addresses to join in one round, in order
// of preference, at most reconnectPerRound: the members seen dead (not
// left: a member that left on purpose comes back by itself) within
// timeout, and, when one of those exists or no other member is alive, the
// seeds that are not the address of a live member or of self. It is pure:
// shuffle orders the candidates (the loop shuffles at random).
func reconnectTargets(self topology.NodeID, selfAddr string, members []Member, seeds []string, now time.Time, timeout time.Duration, shuffle func([]string)) []string {
	live := map[string]bool{selfAddr: true}
	alive, dead := 0, []string(nil)
	for _, mem := range members {
		switch {
		case mem.ID == self:
		case mem.State == MemberAlive:
			alive++
			live[mem.Addr] = true
		case mem.State == MemberDead && now.Sub(mem.Since) <= timeout:
			dead = append(dead, mem.Addr)
		}
	}
	var out []string
	if len(dead) > 0 || alive == 0 {
		for _, s := range seeds {
			if !live[s] && !slices.Contains(dead, s) && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	shuffle(dead)
	shuffle(out)
	out = append(dead, out...) // the dead first: the seeds may all be alive members under other addresses
	return out[:min(len(out), reconnectPerRound)]
}

// reconnectLoop runs reconnectTargets' rounds until Shutdown: at once,
// then every joinRetry until a join succeeds, then every
// ReconnectInterval, jittered.
func (m *Membership) reconnectLoop() {
	defer m.loops.Done()
	interval := m.cfg.Timing.ReconnectInterval
	joined := len(m.cfg.Seeds) == 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-timer.C:
		}
		targets := reconnectTargets(m.cfg.NodeID, m.Addr(), m.Members(), m.cfg.Seeds,
			m.cfg.Clock(), m.cfg.Timing.ReconnectTimeout, func(s []string) {
				rand.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
			})
		for _, addr := range targets {
			if _, err := m.Join([]string{addr}); err != nil {
				m.cfg.Logger.Debug("gossip: rejoin", "addr", addr, "err", err)
				continue
			}
			joined = true
		}
		next := interval/2 + rand.N(interval)
		if !joined {
			next = min(next, joinRetry)
		}
		timer.Reset(next)
	}
}
