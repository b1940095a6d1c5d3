package keyspace

import (
	"testing"

	"github.com/l4xg/grid/digest"
)

// BenchmarkMachineSettle applies entries of 100 settles to a machine
// holding 100,000 PROCESSING records; ns/settle is the cost per command.
// held: each settle holds its record's token (Extend). lost: the token is
// another's, so the settle also looks for the key under other slot bits
// before answering LEASE_LOST. absent: no record of the key at all.
func BenchmarkMachineSettle(b *testing.B) {
	const keys = 100_000
	m := NewMachine()
	tokens := make([]uint64, keys)
	e := machBenchEntry()
	index := uint64(0)
	for k := 0; k < keys; k += machBenchPerEntry {
		index++
		for i := range e.Commands {
			e.Commands[i].Digest = tabTestDigest(uint64(k + i))
		}
		for i, r := range m.Apply(index, &e, nil) {
			tokens[k+i] = r.Token
		}
	}
	for _, c := range []struct {
		name   string
		digest func(k int) digest.Digest
		token  func(k int) uint64
	}{
		{"held", func(k int) digest.Digest { return tabTestDigest(uint64(k)) }, func(k int) uint64 { return tokens[k] }},
		{"lost", func(k int) digest.Digest { return tabTestDigest(uint64(k)) }, func(k int) uint64 { return tokens[k] + 1<<40 }},
		{"absent", func(k int) digest.Digest { return tabTestDigest(uint64(keys + k)) }, func(k int) uint64 { return tokens[k] }},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := Entry{Commands: make([]Command, machBenchPerEntry)}
			out := make([]Result, 0, machBenchPerEntry)
			k := 0
			b.ReportAllocs()
			for b.Loop() {
				index++
				s.Now = int64(index)
				for i := range s.Commands {
					s.Commands[i] = Command{Op: OpExtend, Digest: c.digest(k), Token: c.token(k), Lease: 30_000}
					k = (k + 1) % keys
				}
				out = m.Apply(index, &s, out[:0])
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*machBenchPerEntry), "ns/settle")
		})
	}
}
