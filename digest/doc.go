// Package digest holds the rules that a client and the grid must compute
// alike, written once: the 128-bit digest of a key, an entity and a record
// (Key, Entity, Record), its namespace tag, its slot and the slot's shard
// (Slot, SlotShard, Shard), its byte and hex forms (Append, Decode, String,
// Parse), the layout of fencing tokens and the shard a token names
// (TokenLayout, TokenShard), and the wire limits and defaults of
// docs/design.md section 7 with their validators.
//
// The package is pure: it imports the standard library and go-farm only, so
// the Go client can import it without pulling in the state machine or any
// server package. The digest function and the token layout are part of the
// on-disk and wire formats (TestDigestGolden pins them).
package digest
