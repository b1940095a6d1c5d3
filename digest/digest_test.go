package digest

import (
	"fmt"
	"testing"

	farm "github.com/dgryski/go-farm"
)

// TestDigestGolden pins the digest function. These values were computed once
// and are hard-coded on purpose: the digest is the only form in which a key
// is stored, and its slot bits decide the shard. If this test fails, the hash
// function, its seed, the byte layout (namespace ‖ sep ‖ name) or the
// Hi/Lo order changed, and every live cluster would lose or misroute its
// records. Never "fix" it by updating the values.
func TestDigestGolden(t *testing.T) {
	long := make([]byte, 1024)
	for i := range long {
		long[i] = byte(i)
	}
	cases := []struct {
		name string
		got  Digest
		want Digest
		slot uint32 // of 4096
	}{
		{"Key(orders, invoice-42)", Key("orders", []byte("invoice-42")),
			Digest{Hi: 0xeaf36520b92bdcd1, Lo: 0x08b6e3db60ac7f1e}, 2962},
		{"Key(payments, uuid)", Key("payments", []byte("3f2c9a70-6b1e-4f5e-9d7a-0c1b2e3d4f50")),
			Digest{Hi: 0x90f30616f34e868a, Lo: 0xb9118c4028b5474d}, 3892},
		{"Entity(orders, order-7)", Entity("orders", []byte("order-7")),
			Digest{Hi: 0xbc24652053254e7c, Lo: 0xa2ac59909ee1489e}, 1330},
		{"Record(orders, line-1, order-7)", Record("orders", []byte("line-1"), []byte("order-7")),
			Digest{Hi: 0x914b652053254e7c, Lo: 0xc6a45430ba21de44}, 1330},
		{"Key(t, bytes 0..1023)", Key("t", long),
			Digest{Hi: 0x5b0da7214db12f8a, Lo: 0x2cfd9c644e9d388b}, 1243},
		{"Key(a, empty)", Key("a", nil),
			Digest{Hi: 0x6c203d4ded4a711b, Lo: 0xff698a99314df12f}, 3796},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %#v, want %#v: the digest function changed; this breaks live clusters", c.name, c.got, c.want)
		}
		if s := c.want.Slot(4096); s != c.slot {
			t.Errorf("%s.Slot(4096) = %d, want %d: the slot function changed; this breaks live clusters", c.name, s, c.slot)
		}
	}
	if s := (Digest{Hi: 0xeaf3fee8b92bdcd1, Lo: 0x08b6e3db60ac7f1e}).String(); s != "eaf3fee8b92bdcd108b6e3db60ac7f1e" {
		t.Errorf("String = %q", s)
	}
}

// TestDigestFormula: the digest is Fingerprint128(namespace ‖ sep ‖ name),
// Hi the high half with bits 32-47 the namespace tag, for names short enough for the stack buffer and longer.
func TestDigestFormula(t *testing.T) {
	for _, n := range []int{0, 1, 100, 254, 255, 256, 1024, 5000} {
		name := make([]byte, n)
		for i := range name {
			name[i] = byte(i * 7)
		}
		for _, ns := range []string{"a", "orders", string(make([]byte, 64))} {
			for sep, fn := range map[byte]func(string, []byte) Digest{sepKey: Key, sepEntity: Entity} {
				buf := append(append([]byte(ns), sep), name...)
				lo, hi := farm.Fingerprint128(buf)
				hi = hi&^(0xffff<<32) | uint64(uint16(farm.Fingerprint32([]byte(ns))))<<32
				if got := fn(ns, name); got != (Digest{Hi: hi, Lo: lo}) {
					t.Errorf("ns %q, sep %d, name of %d bytes: %v, want Fingerprint128 %016x%016x", ns, sep, n, got, hi, lo)
				}
			}
		}
	}
}

// TestDigestSeparation: keys never collide across namespaces, nor with
// entities of the same name, nor across the namespace/key boundary.
func TestDigestSeparation(t *testing.T) {
	seen := make(map[Digest]string)
	add := func(what string, d Digest) {
		t.Helper()
		if prev, ok := seen[d]; ok {
			t.Errorf("%s and %s share digest %v", what, prev, d)
		}
		seen[d] = what
	}
	for _, ns := range []string{"a", "ab", "b", "orders", "orders2"} {
		for _, name := range []string{"", "c", "bc", "k", "invoice-42"} {
			add(fmt.Sprintf("key %s/%s", ns, name), Key(ns, []byte(name)))
			add(fmt.Sprintf("entity %s/%s", ns, name), Entity(ns, []byte(name)))
		}
	}
	if Key("ab", []byte("c")) == Key("a", []byte("bc")) {
		t.Error(`namespace "ab" key "c" collides with namespace "a" key "bc"`)
	}
}

// TestRecordDigestEntity: with an entity, a key's record digest takes the
// entity's slot bits (low 32 bits of Hi), so every key of the entity lands
// on the entity's slot for any slot count; the rest comes from the key, so
// keys stay distinct and spread over the hot table's segments (top bits).
func TestRecordDigestEntity(t *testing.T) {
	const keys = 2000
	e := Entity("orders", []byte("order-7"))
	segments := make(map[int]bool)
	seen := make(map[Digest]bool)
	for i := range keys {
		key := fmt.Appendf(nil, "line-%d", i)
		k, r := Key("orders", key), Record("orders", key, []byte("order-7"))
		if r.Lo != k.Lo || r.Hi>>32 != k.Hi>>32 || uint32(r.Hi) != uint32(e.Hi) {
			t.Fatalf("Record(%s) = %v: want Lo and Hi's high half from the key %v, Hi's low half from the entity %v", key, r, k, e)
		}
		for _, slots := range []uint32{1, 2, 7, 4096, 65536, 1<<32 - 1} {
			if r.Slot(slots) != e.Slot(slots) {
				t.Fatalf("Record(%s).Slot(%d) = %d, the entity's is %d", key, slots, r.Slot(slots), e.Slot(slots))
			}
		}
		if seen[r] {
			t.Fatalf("two keys of one entity share a record digest")
		}
		seen[r] = true
		segments[int(r.Hi>>56)] = true
		if got := Record("orders", key, nil); got != k {
			t.Fatalf("Record without an entity = %v, want the key digest %v", got, k)
		}
	}
	if len(segments) < 256*3/4 {
		t.Errorf("%d keys of one entity use only %d of 256 values of Hi's top byte (the hot table's segment)", keys, len(segments))
	}
	// Another entity's keys land on its own slot.
	if Record("orders", []byte("line-1"), []byte("order-8")).Slot(4096) != Entity("orders", []byte("order-8")).Slot(4096) {
		t.Error("order-8's key is not on order-8's slot")
	}
}

// TestSlot: Slot maps into [0, slots) and spreads key digests evenly.
func TestSlot(t *testing.T) {
	const keys, slots = 64_000, 64
	var counts [slots]int
	for i := range keys {
		d := Key("t", fmt.Appendf(nil, "key-%d", i))
		s := d.Slot(slots)
		if s >= slots {
			t.Fatalf("Slot(%d) = %d", slots, s)
		}
		counts[s]++
		if d.Slot(1) != 0 {
			t.Fatalf("Slot(1) = %d", d.Slot(1))
		}
	}
	for s, n := range counts {
		if n < keys/slots*85/100 || n > keys/slots*115/100 {
			t.Errorf("slot %d holds %d of %d keys, want about %d", s, n, keys, keys/slots)
		}
	}
	if s := (Digest{Hi: 1<<32 - 1}).Slot(4096); s != 4095 {
		t.Errorf("top of the range: Slot = %d", s)
	}
	if s := (Digest{Hi: 1<<64 - 1<<32}).Slot(4096); s != 0 {
		t.Errorf("Slot reads Hi's high bits: %d", s)
	}
}

// TestNamespaceTag: every digest made in a namespace carries its tag, entity
// keys included, and the tag leaves the slot bits alone.
func TestNamespaceTag(t *testing.T) {
	for _, ns := range []string{"", "orders", "payments"} {
		want := NamespaceTag(ns)
		for _, d := range []Digest{
			Key(ns, []byte("k")),
			Entity(ns, []byte("e")),
			Record(ns, []byte("k"), []byte("e")),
		} {
			if got := d.NamespaceTag(); got != want {
				t.Errorf("ns %q: digest %v has tag %04x, want %04x", ns, d, got, want)
			}
		}
	}
	if NamespaceTag("orders") == NamespaceTag("payments") {
		t.Errorf("orders and payments share a tag: pick other names for this test")
	}
}
