package keyspace

import (
	"runtime"
	"testing"
)

const machBenchPerEntry = 100

// machBenchEntry returns an entry of machBenchPerEntry reserves, to be given
// fresh digests before each Apply.
func machBenchEntry() Entry {
	e := Entry{Commands: make([]Command, machBenchPerEntry)}
	for i := range e.Commands {
		e.Commands[i] = Command{Op: OpReserve, Lease: 30_000, Retention: 60_000, MaxAttempts: 5}
	}
	return e
}

// BenchmarkMachineReserve applies entries of 100 reserves of unique keys; an
// op is one entry. ns/reserve is the cost per command. The machine is
// replaced every 1,000,000 keys so memory stays bounded.
func BenchmarkMachineReserve(b *testing.B) {
	m := NewMachine()
	e := machBenchEntry()
	out := make([]Result, 0, machBenchPerEntry)
	var index, key uint64
	b.ReportAllocs()
	for b.Loop() {
		if key >= 1_000_000 {
			m, key = NewMachine(), 0
		}
		index++
		e.Now = int64(index)
		for i := range e.Commands {
			e.Commands[i].Digest = tabTestDigest(key)
			key++
		}
		out = m.Apply(index, &e, out[:0])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*machBenchPerEntry), "ns/reserve")
}

// BenchmarkMachineMemory loads 1,000,000 reserved keys into one Machine
// through Apply and reports the heap held per key (HeapInuse delta after
// runtime.GC) and the hot table's slot bytes per key. docs/design.md section
// 4: at most 48 B/key. Run with -benchtime 1x. "request-ids" reserves every
// key with a request id, which its PROCESSING record keeps until settled.
func BenchmarkMachineMemory(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchMachineMemory(b, false) })
	b.Run("request-ids", func(b *testing.B) { benchMachineMemory(b, true) })
}

func benchMachineMemory(b *testing.B, requestIDs bool) {
	const keys = 1_000_000
	for b.Loop() {
		e := machBenchEntry()
		out := make([]Result, 0, machBenchPerEntry)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := NewMachine()
		for index := uint64(1); index <= keys/machBenchPerEntry; index++ {
			e.Now = int64(index)
			for i := range e.Commands {
				k := index*machBenchPerEntry + uint64(i)
				e.Commands[i].Digest = tabTestDigest(k)
				e.Commands[i].HasRequestID, e.Commands[i].RequestID = requestIDs, k
			}
			out = m.Apply(index, &e, out[:0])
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if m.Len() != keys {
			b.Fatalf("Len = %d", m.Len())
		}
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/keys, "bytes/key")
		b.ReportMetric(float64(m.HotBytes())/keys, "hotbytes/key")
		runtime.KeepAlive(m)
	}
}

// BenchmarkMachineLifecycle applies entries of 100 reserves of unique keys,
// each with a request id, and entries of 100 completes of the keys reserved
// 1,000 entries earlier (100,000 keys in flight): the request ids see a
// steady stream of inserts and deletes. ns/key is the cost of one reserve
// and its complete. The machine is replaced every 1,000,000 keys.
func BenchmarkMachineLifecycle(b *testing.B) {
	const inFlight = 100_000
	reserve, complete := machBenchEntry(), Entry{Commands: make([]Command, machBenchPerEntry)}
	out := make([]Result, 0, machBenchPerEntry)
	var m *Machine
	var index, key uint64
	tokens := make([]uint64, inFlight)
	b.ReportAllocs()
	for b.Loop() {
		if key%1_000_000 == 0 {
			m = NewMachine()
		}
		index++
		reserve.Now = int64(index)
		for i := range reserve.Commands {
			reserve.Commands[i].Digest = tabTestDigest(key + uint64(i))
			reserve.Commands[i].HasRequestID, reserve.Commands[i].RequestID = true, key+uint64(i)
		}
		out = m.Apply(index, &reserve, out[:0])
		for i, r := range out {
			tokens[(key+uint64(i))%inFlight] = r.Token
		}
		key += machBenchPerEntry
		if key%1_000_000 < inFlight {
			continue // the keys reserved before the machine was replaced are not in it
		}
		index++
		complete.Now = int64(index)
		for i := range complete.Commands {
			k := key - inFlight + uint64(i)
			complete.Commands[i] = Command{Op: OpComplete, Digest: tabTestDigest(k), Token: tokens[k%inFlight], Retention: 60_000}
		}
		out = m.Apply(index, &complete, out[:0])
		if out[0].State != Completed {
			b.Fatalf("a complete left its key %v", out[0].State)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*machBenchPerEntry), "ns/key")
}
