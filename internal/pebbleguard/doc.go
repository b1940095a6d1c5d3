// Package pebbleguard lets a Pebble database be closed while other
// goroutines use it: users hold it shared for each operation, and Close
// waits for them, closes it once, and makes later Acquires fail with the
// owner's closed error instead of reaching a closed database (which Pebble
// answers with a panic). The cold tier (tiering) keeps its Pebble this way; raftlog
// opens Pebble only to read a legacy log once, read-only, and needs no
// guard.
package pebbleguard
