package keyspace

import farm "github.com/dgryski/go-farm"

// RequestIDHash is the form in which a Reserve's request id enters the log
// and the record: its 64-bit FarmHash Fingerprint64. The API computes it once,
// when it builds the command; the state machine only compares hashes. Two
// request ids that share a hash would be taken for one only if they reserve
// the same key while one of them holds it, a chance of 2^-64 per pair. Like
// the digest, the function is part of the log format.
func RequestIDHash(id []byte) uint64 { return farm.Fingerprint64(id) }
