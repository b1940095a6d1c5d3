package raftlog

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

const (
	benchBatch   = 64
	benchPayload = 256
)

// benchBatchFor returns a batch of benchBatch entries of benchPayload bytes
// starting at index from, reusing logs.
func benchBatchFor(logs []*raft.Log, data []byte, from uint64) []*raft.Log {
	for i := range logs {
		logs[i] = &raft.Log{Index: from + uint64(i), Term: 1, Type: raft.LogCommand, Data: data}
	}
	return logs
}

// BenchmarkJournalStoreLogsSync: one group, one synced batch of 64 x
// 256-byte entries per op. fsyncs/op is the number of fdatasyncs per batch;
// p99-us, p99.9-us and max-us are of the ops' times: a write that also
// flushes the zeros ahead of the frames (Journal.zeroAhead) is one of them.
func BenchmarkJournalStoreLogsSync(b *testing.B) {
	j := openJournal(b, b.TempDir(), JournalOptions{})
	g := j.Group(1)
	logs, data := make([]*raft.Log, benchBatch), make([]byte, benchPayload)
	b.SetBytes(benchBatch * benchPayload)
	before := j.WriteStats().Fsyncs
	var took []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if err := g.StoreLogs(benchBatchFor(logs, data, uint64(i)*benchBatch+1)); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	b.ReportMetric(float64(j.WriteStats().Fsyncs-before)/float64(b.N), "fsyncs/op")
	slices.Sort(took)
	at := func(q float64) float64 { return float64(took[int(q*float64(len(took)-1))].Microseconds()) }
	b.ReportMetric(at(0.99), "p99-us")
	b.ReportMetric(at(0.999), "p99.9-us")
	b.ReportMetric(at(1), "max-us")
}

// BenchmarkJournalStoreLogsSync8Groups: 8 groups, each on its own
// goroutine, write synced 64 x 256-byte batches concurrently; an op is one
// batch. fsyncs/op below 1 shows that batches of different groups share
// fdatasyncs. At bf84885 the Pebble store it replaced ran the same
// benchmark beside it (BenchmarkStoreLogsSync8Groups): 128-131 us/op
// against 86-96 on this machine.
func BenchmarkJournalStoreLogsSync8Groups(b *testing.B) {
	const groups = 8
	j := openJournal(b, b.TempDir(), JournalOptions{})
	data := make([]byte, benchPayload)
	b.SetBytes(benchBatch * benchPayload)
	var next atomic.Int64 // ops handed out so far
	before := j.WriteStats().Fsyncs
	b.ResetTimer()
	var wg sync.WaitGroup
	for id := uint64(1); id <= groups; id++ {
		wg.Go(func() {
			g := j.Group(id)
			logs := make([]*raft.Log, benchBatch)
			for idx := uint64(1); next.Add(1) <= int64(b.N); idx += benchBatch {
				if err := g.StoreLogs(benchBatchFor(logs, data, idx)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(j.WriteStats().Fsyncs-before)/float64(b.N), "fsyncs/op")
}

// BenchmarkOpenJournal: open (replay) and close a journal holding about
// 200 MB of entries, as a node does at every restart. Four groups take
// turns writing batches of 256-byte entries, without sync (the setup takes
// seconds); nothing is compacted, so every segment is replayed. batch=64
// makes frames of 16 KiB (four 64 MiB segments, the last one partly
// written), batch=1 frames of one entry, as a lightly loaded node writes
// them (five segments). The opens use the production options: each also
// remakes the spare segment and rewrites the last frame, synced.
func BenchmarkOpenJournal(b *testing.B) {
	for _, batch := range []int{64, 1} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchOpenJournal(b, batch) })
	}
}

func benchOpenJournal(b *testing.B, batch int) {
	const (
		groups = 4
		target = 3*DefaultSegmentSize + DefaultSegmentSize/2 // bytes of entries
	)
	dir := b.TempDir()
	j, err := OpenJournal(dir, JournalOptions{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	logs, data := make([]*raft.Log, batch), make([]byte, benchPayload)
	for i := range data {
		data[i] = byte(i) | 1
	}
	for id := uint64(1); id <= groups; id++ {
		if err := j.Group(id).SetUint64([]byte("CurrentTerm"), 1); err != nil {
			b.Fatal(err)
		}
	}
	for n := 0; n*batch*benchPayload < target; n++ {
		g := j.Group(uint64(n%groups) + 1)
		if err := g.StoreLogs(benchBatchFor(logs, data, uint64(n/groups*batch)+1)); err != nil {
			b.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		j, err := OpenJournal(dir, JournalOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
