package keyspace

// fail settles a held lease as FAILED, retryable after a backoff, or as
// POISONED when asked or when the attempts are used up. Idempotent for the
// same token.
func (m *Machine) fail(c *Command, now int64) Result {
	d, rec, had := m.held(c, now)
	if !had || rec.Token != c.Token {
		return m.view(OutcomeLeaseLost, d, rec, had, now)
	}
	switch rec.State() {
	case Failed, Poisoned:
		res := m.view(OutcomeOK, d, rec, true, now)
		res.Repeated = true
		return res
	case Processing:
	default:
		return m.view(OutcomeLeaseLost, d, rec, true, now)
	}
	var next Record
	if c.Poison || rec.Attempts() >= rec.MaxAttempts() {
		next = settle(rec, Poisoned, now, c.Retention)
		m.dropPending(d, &next)
	} else {
		delay := c.RetryAfter
		if !c.HasRetryAfter {
			delay = Backoff(rec.Attempts())
		}
		next = rec
		next.Deadline = now + delay
		next.Meta = makeMeta(Failed, rec.flags(), rec.Attempts(), uint64(rec.MaxAttempts()))
	}
	m.dropRequestID(d, &next)
	m.put(d, rec, true, next)
	return m.view(OutcomeOK, d, next, true, now)
}

// Backoff is the retry delay (ms) after a failed attempt: BackoffBase doubled
// per attempt, at most BackoffMax.
func Backoff(attempt uint8) int64 {
	base, limit := BackoffBase.Milliseconds(), BackoffMax.Milliseconds()
	if attempt == 0 {
		return base
	}
	delay := base
	for i := uint8(1); i < attempt && delay < limit; i++ {
		delay *= 2
	}
	return min(delay, limit)
}
