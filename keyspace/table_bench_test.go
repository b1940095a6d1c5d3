package keyspace

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"

	"github.com/l4xg/grid/digest"
)

const tabBenchKeys = 1_000_000

// BenchmarkTableMemory loads benchKeys random digests into one Table and
// reports the heap it holds per key (HeapInuse delta) and the slot bytes per
// key (Bytes). Run with -benchtime 1x.
func BenchmarkTableMemory(b *testing.B) {
	for b.Loop() {
		tabBenchMemory(b, tabBenchKeys)
	}
}

// BenchmarkTableMemory10M is BenchmarkTableMemory at 10,000,000 keys (about
// 0.5 GB of heap); skipped with -short.
func BenchmarkTableMemory10M(b *testing.B) {
	if testing.Short() {
		b.Skip("-short")
	}
	for b.Loop() {
		tabBenchMemory(b, 10*tabBenchKeys)
	}
}

func tabBenchMemory(b *testing.B, keys int) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tab := NewTable()
	for i := range uint64(keys) {
		tab.Put(tabTestDigest(i), tabTestRecord(i))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/float64(keys), "bytes/key")
	b.ReportMetric(float64(tab.Bytes())/float64(keys), "slotbytes/key")
	b.ReportMetric(tabLoadFactor(tab), "load")
	runtime.KeepAlive(tab)
}

// BenchmarkTablePut inserts fresh keys, growth included; the table is
// replaced every benchKeys inserts.
func BenchmarkTablePut(b *testing.B) {
	tab := NewTable()
	i := uint64(0)
	for b.Loop() {
		if i%tabBenchKeys == 0 {
			tab = NewTable()
		}
		tab.Put(tabTestDigest(i), tabTestRecord(i+1))
		i++
	}
}

func tabLoaded() *Table {
	tab := NewTable()
	for i := range uint64(tabBenchKeys) {
		tab.Put(tabTestDigest(i), tabTestRecord(i))
	}
	return tab
}

func BenchmarkTableGetHit(b *testing.B) {
	tab := tabLoaded()
	i := uint64(0)
	for b.Loop() {
		if _, ok := tab.Get(tabTestDigest(i % tabBenchKeys)); !ok {
			b.Fatal("miss")
		}
		i += 7919
	}
}

func BenchmarkTableGetMiss(b *testing.B) {
	tab := tabLoaded()
	i := uint64(tabBenchKeys)
	for b.Loop() {
		if _, ok := tab.Get(tabTestDigest(i)); ok {
			b.Fatal("hit")
		}
		i++
	}
}

// BenchmarkReadSnapshot restores a machine of 1 M records: the restart path.
func BenchmarkReadSnapshot(b *testing.B) {
	m := NewMachine()
	for i := range 1_000_000 {
		m.table.Put(digest.Key("b", []byte(strconv.Itoa(i))), Record{Token: uint64(i) + 1, Deadline: 1, Meta: makeMeta(Completed, 0, 1, 0)})
	}
	var buf bytes.Buffer
	s := m.Snapshot()
	if _, err := s.WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	s.Release()
	b.SetBytes(int64(buf.Len()))
	b.ResetTimer()
	for range b.N {
		if _, err := ReadSnapshot(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
}
