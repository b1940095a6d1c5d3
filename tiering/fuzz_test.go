package tiering

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzRestore feeds arbitrary bytes to Restore: it must either refuse them
// with ErrCorruptSnapshot, keeping the shard's records, or accept them, in
// which case the shard streams the same bytes back (the format has one
// encoding per record set), less the files reference of a stream that has
// one.
func FuzzRestore(f *testing.F) {
	s := openTest(f, testOptions())
	src := s.Shard(1)
	fill(f, src, 0, 3)
	valid := dump(f, src)
	f.Add(valid)
	f.Add(dump(f, s.Shard(2))) // empty
	f.Add(valid[:len(valid)/2])
	f.Add([]byte("L4XGCLD1"))
	f.Add(persist(f, src, "1-3-1"))

	sh := s.Shard(3)
	kept := fill(f, sh, 100, 2)
	baseline := dump(f, sh)
	f.Fuzz(func(t *testing.T, in []byte) {
		err := sh.Restore(bytes.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrCorruptSnapshot) {
				t.Fatalf("Restore = %v, want ErrCorruptSnapshot", err)
			}
			checkHolds(t, sh, kept)
			return
		}
		if out := dump(t, sh); !bytes.Equal(out, withoutRef(in)) {
			t.Fatalf("accepted %x but streams %x", in, out)
		}
		if err := sh.Restore(bytes.NewReader(baseline)); err != nil {
			t.Fatal(err)
		}
	})
}

// withoutRef returns a stream with a files reference as WriteTo would have
// written it, without one.
func withoutRef(b []byte) []byte {
	if len(b) < 9 || [8]byte(b[:8]) != coldSnapshotMagicRefs {
		return b
	}
	rest := b[8+1+int(b[8])+16:]
	return withCRC(append(coldSnapshotMagic[:], rest...))
}
