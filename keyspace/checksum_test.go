package keyspace

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"
)

// TestChecksumAgrees: a machine that applied the same entries, and one
// restored from a snapshot, have the checksum of the original.
func TestChecksumAgrees(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		run, log := loggedMdlRun(rt)
		want := run.m.Checksum()
		twin := NewMachine()
		for _, l := range log {
			twin.Apply(l.index, &l.entry, nil)
		}
		if got := twin.Checksum(); got != want {
			rt.Fatalf("twin checksum %+v, original %+v", got, want)
		}
		var buf bytes.Buffer
		snap := run.m.Snapshot()
		_, err := snap.WriteTo(&buf)
		snap.Release()
		if err != nil {
			rt.Fatalf("WriteTo: %v", err)
		}
		restored, err := ReadSnapshot(&buf)
		if err != nil {
			rt.Fatalf("ReadSnapshot: %v", err)
		}
		if got := restored.Checksum(); got != want {
			rt.Fatalf("restored checksum %+v, original %+v", got, want)
		}
	})
}

// TestChecksumSeesEachPart: every part of a record's state, and an entity
// version, changes the checksum; a record gone at the stamp does not count.
func TestChecksumSeesEachPart(t *testing.T) {
	d, entity := tabTestDigest(1), tabTestDigest(99)
	const lease = 1_000
	reserved := func(extra func(*Command)) *Machine {
		m := NewMachine()
		c := reserveOf(d, lease)
		if extra != nil {
			extra(&c)
		}
		m.Apply(1, &Entry{Now: 100, Commands: []Command{c}}, nil)
		return m
	}
	token := func(m *Machine) uint64 {
		r, _ := m.table.Get(d)
		return r.Token
	}
	settled := func(op Op, result string) *Machine {
		m := reserved(nil)
		m.Apply(2, &Entry{Now: 200, Commands: []Command{{Op: op, Digest: d, Token: token(m), Retention: 5_000, Result: []byte(result)}}}, nil)
		return m
	}
	cases := map[string]*Machine{
		"empty":    NewMachine(),
		"reserved": reserved(nil),
		"reserved later": func() *Machine {
			m := NewMachine()
			m.Apply(1, &Entry{Now: 101, Commands: []Command{reserveOf(d, lease)}}, nil)
			return m
		}(),
		"other token": func() *Machine {
			m := NewMachine()
			m.Apply(2, &Entry{Now: 100, Commands: []Command{reserveOf(d, lease)}}, nil)
			return m
		}(),
		"with fingerprint":        reserved(func(c *Command) { c.HasFingerprint, c.Fingerprint = true, 7 }),
		"with request id":         reserved(func(c *Command) { c.HasRequestID, c.RequestID = true, 7 }),
		"with entity":             reserved(func(c *Command) { c.HasEntity, c.Entity, c.Version = true, entity, 3 }),
		"completed":               settled(OpComplete, ""),
		"completed with a result": settled(OpComplete, "done"),
		"failed":                  settled(OpFail, ""),
		"entity raised": func() *Machine {
			m := reserved(func(c *Command) { c.HasEntity, c.Entity, c.Version = true, entity, 3 })
			m.Apply(2, &Entry{Now: 200, Commands: []Command{{Op: OpComplete, Digest: d, Token: token(m), Retention: 5_000}}}, nil)
			return m
		}(),
	}
	seen := map[Checksum]string{}
	for name, m := range cases {
		c := m.Checksum()
		if other, dup := seen[c]; dup {
			t.Errorf("%s and %s have the same checksum %+v", name, other, c)
		}
		seen[c] = name
	}
	if c := cases["entity raised"].Checksum(); c.Entities != 1 {
		t.Errorf("entity raised: %d entities in the checksum, want 1", c.Entities)
	}

	// Completed with a retention of 5 s at 200: gone at 5200, before any
	// sweep reclaims it.
	gone := settled(OpComplete, "")
	gone.Apply(3, &Entry{Now: 5_200}, nil)
	if gone.Len() != 1 {
		t.Fatalf("the test wants the gone record still held: %d held", gone.Len())
	}
	if got, want := gone.Checksum(), NewMachine().Checksum(); got != want {
		t.Errorf("a machine holding only a gone record: checksum %+v, want an empty machine's %+v", got, want)
	}
}
