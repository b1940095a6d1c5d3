package tiering

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
)

type audited struct {
	shard       uint32
	d           digest.Digest
	completedAt int64
}

func runAudit(t *testing.T, s *Store, ns string, since, until int64, stopAfter int) []audited {
	t.Helper()
	var got []audited
	err := s.Audit(digest.NamespaceTag(ns), since, until, func(shard uint32, d digest.Digest, r keyspace.ColdRecord) bool {
		if d.NamespaceTag() != digest.NamespaceTag(ns) {
			t.Errorf("audit of %s returned digest %v of tag %x", ns, d, d.NamespaceTag())
		}
		got = append(got, audited{shard, d, r.CompletedAt()})
		return stopAfter <= 0 || len(got) < stopAfter
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestAuditRangesNamespacesAndOrder(t *testing.T) {
	// The tags are fixed: equal ones would be a change of the tag function,
	// which the ranges below rely on telling these namespaces apart.
	if digest.NamespaceTag("orders") == digest.NamespaceTag("billing") {
		t.Fatal("namespaces orders and billing share a tag")
	}
	s := openTest(t, testOptions())
	var want []audited
	for _, id := range []uint32{7, 2, 40} {
		sh := s.Shard(id)
		for i := range 30 {
			completedAt := int64(1000 + (i*17)%30*10) // 1000..1290, shuffled
			for _, ns := range []string{"orders", "billing"} {
				d := digest.Key(ns, []byte{byte(id), byte(i)})
				r := settled(i, completedAt, 1<<40)
				sh.Put(d, &r)
				if ns == "orders" && completedAt >= 1100 && completedAt < 1200 {
					want = append(want, audited{id, d, completedAt})
				}
			}
		}
		mustFlush(t, sh)
	}
	// Pending writes are not audited.
	pending := settled(1, 1150, 1<<40)
	s.Shard(2).Put(digest.Key("orders", []byte("pending")), &pending)

	slices.SortFunc(want, func(a, b audited) int {
		if a.shard != b.shard {
			return int(a.shard) - int(b.shard)
		}
		return int(a.completedAt - b.completedAt)
	})
	got := runAudit(t, s, "orders", 1100, 1200, 0)
	if len(got) != len(want) {
		t.Fatalf("audit returned %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].shard != want[i].shard || got[i].completedAt != want[i].completedAt {
			t.Fatalf("record %d = %+v, want %+v (order by shard, then completed-at)", i, got[i], want[i])
		}
	}
	if got := runAudit(t, s, "orders", 1100, 1200, 3); len(got) != 3 {
		t.Fatalf("audit stopped after %d, want 3", len(got))
	}
	if got := runAudit(t, s, "orders", 1290, 1290, 0); len(got) != 0 {
		t.Fatalf("empty range returned %d", len(got))
	}
	if got := runAudit(t, s, "orders", 0, 1<<40, 0); len(got) != 90 {
		t.Fatalf("full range returned %d, want 90", len(got))
	}
	// A purge removes the audit entries too.
	if n := s.Shard(7).Purge(1<<41, 1000); n != 60 {
		t.Fatalf("Purge = %d", n)
	}
	mustFlush(t, s.Shard(7))
	if got := runAudit(t, s, "billing", 0, 1<<40, 0); len(got) != 60 {
		t.Fatalf("billing audit after purging shard 7 returned %d, want 60", len(got))
	}
}

func TestAuditFollowsRestoredGeneration(t *testing.T) {
	s := openTest(t, testOptions())
	sh := s.Shard(1)
	fill(t, sh, 0, 10)
	stream := dump(t, sh)
	if err := sh.Restore(bytes.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if got := runAudit(t, s, "ns", 0, 1<<40, 0); len(got) != 10 {
		t.Fatalf("audit after restore returned %d, want 10", len(got))
	}
	// A store reopened on the same files finds the live generation.
	if err := s.db.With(func(db *pebble.DB) error { return db.Flush() }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.FS = s.opts.FS
	s2 := openTest(t, opts)
	if got := runAudit(t, s2, "ns", 0, 1<<40, 0); len(got) != 10 {
		t.Fatalf("audit after reopening returned %d, want 10", len(got))
	}
	if sh2 := s2.Shard(1); sh2.gen != 1 {
		t.Fatalf("reopened shard has generation %d, want 1", sh2.gen)
	}
	mustGet(t, s2.Shard(1), keyDigest("ns", 3), settled(3, 1003, 5003))
}

func TestAuditClosed(t *testing.T) {
	s, err := Open("cold", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	err = s.Audit(1, 0, 10, func(uint32, digest.Digest, keyspace.ColdRecord) bool { return true })
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Audit after Close: %v", err)
	}
}
