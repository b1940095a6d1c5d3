//go:build race

package keyspace

// ksRace reports whether the race detector is on: the property tests then
// run fewer rounds to keep `go test -race` near the plain run's budget.
const ksRace = true
