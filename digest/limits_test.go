package digest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLimitsMatchDesign: the limits of docs/design.md section 7 and section 1.
func TestLimitsMatchDesign(t *testing.T) {
	checks := []struct {
		name      string
		got, want int64
	}{
		{"MaxKeyLen (key <= 1 KiB)", MaxKeyLen, 1024},
		{"MaxNamespaceLen ([a-z0-9][a-z0-9._-]{0,63})", MaxNamespaceLen, 64},
		{"MaxResultLen (result <= 64 KiB)", MaxResultLen, 64 << 10},
		{"MaxBatchOps (batch <= 1000 operations)", MaxBatchOps, 1000},
		{"MaxRequestBytes (request <= 4 MiB)", MaxRequestBytes, 4 << 20},
		{"MinLease (100 ms)", int64(MinLease), int64(100 * time.Millisecond)},
		{"MaxLease (1 h)", int64(MaxLease), int64(time.Hour)},
		{"MaxRetention (400 days)", int64(MaxRetention), int64(400 * 24 * time.Hour)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	// Defaults must pass their own validation, and a batch must fit an entry.
	if err := ValidateLease(DefaultLease); err != nil {
		t.Errorf("DefaultLease: %v", err)
	}
	if err := ValidateRetention(DefaultRetention); err != nil {
		t.Errorf("DefaultRetention: %v", err)
	}
	if err := ValidateRetention(DefaultPoisonRetention); err != nil {
		t.Errorf("DefaultPoisonRetention: %v", err)
	}
	if err := ValidateMaxAttempts(DefaultMaxAttempts); err != nil {
		t.Errorf("DefaultMaxAttempts: %v", err)
	}
	if MaxBatchOps > MaxTokenPosition+1 {
		t.Errorf("MaxBatchOps %d: a batch's positions must fit a token's %d", MaxBatchOps, MaxTokenPosition+1)
	}
}

// TestValidate: every validator accepts its bounds, refuses just past them
// with an error that wraps its sentinel (and no other) and names the limit.
func TestValidate(t *testing.T) {
	sentinels := []error{ErrInvalidNamespace, ErrEmptyKey, ErrKeyTooLong, ErrEntityTooLong, ErrLeaseOutOfRange,
		ErrRetention, ErrRetryAfter, ErrMaxAttempts, ErrResultTooLarge, ErrInvalidToken, ErrBatchTooLarge, ErrEmptyBatch}
	for _, s := range sentinels {
		if !strings.HasPrefix(s.Error(), "keyspace: ") {
			t.Errorf("sentinel %q lacks the package prefix", s)
		}
	}
	ns64 := strings.Repeat("a", 64)
	cases := []struct {
		name     string
		err      error
		sentinel error    // nil: must pass
		mentions []string // the limit, as the message must name it
	}{
		{"namespace a", ValidateNamespace("a"), nil, nil},
		{"namespace 0a.b_c-d", ValidateNamespace("0a.b_c-d"), nil, nil},
		{"namespace of 64", ValidateNamespace(ns64), nil, nil},
		{"namespace empty", ValidateNamespace(""), ErrInvalidNamespace, []string{"1..64"}},
		{"namespace of 65", ValidateNamespace(ns64 + "a"), ErrInvalidNamespace, []string{"1..64"}},
		{"namespace upper case", ValidateNamespace("Orders"), ErrInvalidNamespace, []string{"[a-z0-9][a-z0-9._-]{0,63}"}},
		{"namespace leading dot", ValidateNamespace(".a"), ErrInvalidNamespace, []string{"[a-z0-9][a-z0-9._-]{0,63}"}},
		{"namespace leading dash", ValidateNamespace("-a"), ErrInvalidNamespace, []string{"[a-z0-9][a-z0-9._-]{0,63}"}},
		{"namespace slash", ValidateNamespace("a/b"), ErrInvalidNamespace, []string{"[a-z0-9][a-z0-9._-]{0,63}"}},
		{"namespace NUL", ValidateNamespace("a\x00"), ErrInvalidNamespace, []string{"[a-z0-9][a-z0-9._-]{0,63}"}},
		{"namespace non-ASCII", ValidateNamespace("é"), ErrInvalidNamespace, []string{"[a-z0-9][a-z0-9._-]{0,63}"}},

		{"key of 1", ValidateKey([]byte("k")), nil, nil},
		{"key of 1024", ValidateKey(make([]byte, 1024)), nil, nil},
		{"key empty", ValidateKey(nil), ErrEmptyKey, []string{"1024"}},
		{"key of 1025", ValidateKey(make([]byte, 1025)), ErrKeyTooLong, []string{"1025", "limit 1024"}},

		{"entity none", ValidateEntity(nil), nil, nil},
		{"entity of 1024", ValidateEntity(make([]byte, 1024)), nil, nil},
		{"entity of 1025", ValidateEntity(make([]byte, 1025)), ErrEntityTooLong, []string{"1025", "limit 1024"}},

		{"lease 100ms", ValidateLease(100 * time.Millisecond), nil, nil},
		{"lease 1h", ValidateLease(time.Hour), nil, nil},
		{"lease 99ms", ValidateLease(99 * time.Millisecond), ErrLeaseOutOfRange, []string{"100ms", "1h0m0s"}},
		{"lease 0", ValidateLease(0), ErrLeaseOutOfRange, []string{"100ms", "1h0m0s"}},
		{"lease 1h+1ms", ValidateLease(time.Hour + time.Millisecond), ErrLeaseOutOfRange, []string{"100ms", "1h0m0s"}},

		{"retention 1ms", ValidateRetention(time.Millisecond), nil, nil},
		{"retention 400d", ValidateRetention(400 * 24 * time.Hour), nil, nil},
		{"retention 0", ValidateRetention(0), ErrRetention, []string{"400 days"}},
		{"retention -1ms", ValidateRetention(-time.Millisecond), ErrRetention, []string{"400 days"}},
		{"retention 400d+1ms", ValidateRetention(400*24*time.Hour + time.Millisecond), ErrRetention, []string{"400 days"}},

		{"retry_after 0", ValidateRetryAfter(0), nil, nil},
		{"retry_after 400d", ValidateRetryAfter(MaxRetention), nil, nil},
		{"retry_after -1ms", ValidateRetryAfter(-time.Millisecond), ErrRetryAfter, []string{"limit 0..9600h0m0s"}},
		{"retry_after 400d+1ms", ValidateRetryAfter(MaxRetention + time.Millisecond), ErrRetryAfter, []string{"limit 0..9600h0m0s"}},

		{"max_attempts 1", ValidateMaxAttempts(1), nil, nil},
		{"max_attempts 100", ValidateMaxAttempts(100), nil, nil},
		{"max_attempts 0", ValidateMaxAttempts(0), ErrMaxAttempts, []string{"1..100"}},
		{"max_attempts 101", ValidateMaxAttempts(101), ErrMaxAttempts, []string{"1..100"}},
		{"max_attempts 256", ValidateMaxAttempts(256), ErrMaxAttempts, []string{"1..100"}},

		{"result none", ValidateResult(nil), nil, nil},
		{"result of 64 KiB", ValidateResult(make([]byte, 64<<10)), nil, nil},
		{"result of 64 KiB + 1", ValidateResult(make([]byte, 64<<10+1)), ErrResultTooLarge, []string{"65537", "limit 65536", "64 KiB"}},

		{"token 1", ValidateToken(1), nil, nil},
		{"token 0", ValidateToken(0), ErrInvalidToken, []string{"token 0"}},

		{"batch of 1", ValidateBatchLen(1), nil, nil},
		{"batch of 1000", ValidateBatchLen(1000), nil, nil},
		{"batch of 0", ValidateBatchLen(0), ErrEmptyBatch, []string{"at least one"}},
		{"batch of 1001", ValidateBatchLen(1001), ErrBatchTooLarge, []string{"1001", "limit 1000"}},
	}
	for _, c := range cases {
		if c.sentinel == nil {
			if c.err != nil {
				t.Errorf("%s: %v, want nil", c.name, c.err)
			}
			continue
		}
		if !errors.Is(c.err, c.sentinel) {
			t.Errorf("%s: %v does not wrap %v", c.name, c.err, c.sentinel)
			continue
		}
		for _, s := range sentinels {
			if s != c.sentinel && errors.Is(c.err, s) {
				t.Errorf("%s: %v also wraps %v", c.name, c.err, s)
			}
		}
		msg := c.err.Error()
		if !strings.HasPrefix(msg, c.sentinel.Error()+": ") {
			t.Errorf("%s: %q does not start with its sentinel", c.name, msg)
		}
		for _, m := range c.mentions {
			if !strings.Contains(msg, m) {
				t.Errorf("%s: %q does not name the limit (%q)", c.name, msg, m)
			}
		}
	}
}

// TestValidateNamespaceQuotesInput: the offending namespace is quoted, so a
// control character cannot forge the message.
func TestValidateNamespaceQuotesInput(t *testing.T) {
	err := ValidateNamespace("a\nb")
	if err == nil || bytes.ContainsRune([]byte(err.Error()), '\n') {
		t.Errorf("ValidateNamespace(a\\nb) = %v", err)
	}
}
