// Package pebbleguard lets a Pebble database be closed while other
// goroutines use it: users hold it shared for each operation, and Close
// waits for them, closes it once, and makes later Acquires fail with the
// owner's closed error instead of reaching a closed database (which Pebble
// answers with a panic). raftlog and tiering both keep their Pebble this
// way.
package pebbleguard
