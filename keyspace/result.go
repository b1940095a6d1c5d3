package keyspace

// Outcome is the answer to one command (docs/design.md section 2). The
// numbering matches the wire protocol.
type Outcome uint8

const (
	OutcomeOK Outcome = iota + 1
	OutcomeAcquired
	OutcomeBusy
	OutcomeDuplicate
	OutcomePoisoned
	OutcomeStale
	OutcomeMismatch
	OutcomeLeaseLost
	// OutcomeIgnored answers an ignorable command this version does not know.
	OutcomeIgnored
)

var outcomeNames = [...]string{"", "OK", "ACQUIRED", "BUSY", "DUPLICATE", "POISONED", "STALE", "MISMATCH", "LEASE_LOST", "IGNORED"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return "OUTCOME(?)"
}

// Result is the outcome of one command and the record as it stands after it.
// Result aliases the stored result bytes: callers must not modify them.
type Result struct {
	Outcome     Outcome
	State       State
	Token       uint64
	Attempt     uint8
	Deadline    int64 // Unix ms; 0 when absent
	RetryAfter  int64 // ms, for BUSY
	CompletedAt int64 // Unix ms, for COMPLETED and POISONED
	Result      []byte

	HasFingerprint bool
	Fingerprint    uint64

	Now     int64 // the stamp the command was evaluated at
	Existed bool  // Forget: a record was removed
	// TookOver is set when Reserve found an expired lease or an elapsed
	// retry delay and took the record over (ACQUIRED or POISONED).
	TookOver bool
	// LeaseExpired is set when that takeover was of an expired PROCESSING
	// lease: a crashed or stalled holder.
	LeaseExpired bool
	// Repeated is set when a Complete or Fail found its own settle already
	// done and answered OK without changing anything.
	Repeated bool
	// Replayed is set when a Reserve carried the request id of the lease in
	// force on its key: the ACQUIRED answer is that same grant again (same
	// token, deadline and attempt), and nothing changed.
	Replayed bool
	// Found is set when a settle (Complete, Fail, Release, Extend) found a
	// record of its key on this shard, under its digest or under other slot
	// bits (held.go). A settle that found none changed nothing: the API then
	// asks the key's own shard (a token names the shard it was granted by,
	// which need not be the key's).
	Found bool
	// Cold is set when the record was found in the cold tier.
	Cold bool
}
