package digest

import (
	"errors"
	"fmt"
	"time"
)

// Limits of docs/design.md section 7 and the defaults the API fills in. They
// are part of the protocol contract, not tuning.
const (
	MaxKeyLen       = 1024
	MaxEntityLen    = 1024
	MaxNamespaceLen = 64
	MaxResultLen    = 64 << 10
	MaxBatchOps     = 1000
	MaxRequestBytes = 4 << 20
	MinLease        = 100 * time.Millisecond
	MaxLease        = time.Hour
	MaxRetention    = 400 * 24 * time.Hour
	MaxAttemptsCap  = 100

	DefaultLease           = 30 * time.Second
	DefaultRetention       = 7 * 24 * time.Hour
	DefaultMaxAttempts     = 5
	DefaultPoisonRetention = 7 * 24 * time.Hour

	// MaxRequestIDLen bounds a Reserve's request id (docs/design.md section 3).
	MaxRequestIDLen = 64

	// DefaultMaxClockOffset is the default bound on the clock offset
	// between any two nodes (gridnode serve --max-clock-offset). Leases
	// hold only while clocks agree within it, and a holder's lease margin
	// must be at least this large (shard/doc.go states the rule).
	DefaultMaxClockOffset = 250 * time.Millisecond
)

// Sentinel errors for invalid input. Each names the limit it enforces; the
// API maps them to gRPC codes in one place. Their text is what clients see
// on the wire, and it keeps the "keyspace:" prefix it had before these
// rules moved here.
var (
	ErrInvalidNamespace = errors.New("keyspace: invalid namespace")
	ErrEmptyKey         = errors.New("keyspace: empty key")
	ErrKeyTooLong       = errors.New("keyspace: key too long")
	ErrEntityTooLong    = errors.New("keyspace: entity too long")
	ErrLeaseOutOfRange  = errors.New("keyspace: lease out of range")
	ErrRetention        = errors.New("keyspace: retention out of range")
	ErrRetryAfter       = errors.New("keyspace: retry_after out of range")
	ErrMaxAttempts      = errors.New("keyspace: max_attempts out of range")
	ErrResultTooLarge   = errors.New("keyspace: result too large")
	ErrInvalidToken     = errors.New("keyspace: invalid token")
	ErrBatchTooLarge    = errors.New("keyspace: batch too large")
	ErrEmptyBatch       = errors.New("keyspace: empty batch")
	ErrRequestIDTooLong = errors.New("keyspace: request id too long")
)

// ValidateNamespace checks [a-z0-9][a-z0-9._-]{0,63}: bytes that are not
// valid UTF-8, control bytes and upper case are refused alike. The error
// quotes the namespace with Quote.
func ValidateNamespace(ns string) error {
	if len(ns) == 0 || len(ns) > MaxNamespaceLen {
		return fmt.Errorf("%w: %s: length %d, want 1..%d bytes matching [a-z0-9][a-z0-9._-]{0,63}",
			ErrInvalidNamespace, Quote(ns), len(ns), MaxNamespaceLen)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("%w: %s: byte %s at %d not allowed (want [a-z0-9][a-z0-9._-]{0,63})",
				ErrInvalidNamespace, Quote(ns), Quote(ns[i:i+1]), i)
		}
	}
	return nil
}

// ValidateKey checks 1..MaxKeyLen bytes.
func ValidateKey(key []byte) error {
	switch {
	case len(key) == 0:
		return fmt.Errorf("%w: key must be 1..%d bytes", ErrEmptyKey, MaxKeyLen)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLong, len(key), MaxKeyLen)
	}
	return nil
}

// ValidateEntity checks an optional entity id (empty means none).
func ValidateEntity(entity []byte) error {
	if len(entity) > MaxEntityLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrEntityTooLong, len(entity), MaxEntityLen)
	}
	return nil
}

// ValidateRequestID checks an optional request id (empty means none):
// at most MaxRequestIDLen bytes.
func ValidateRequestID(id []byte) error {
	if len(id) > MaxRequestIDLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrRequestIDTooLong, len(id), MaxRequestIDLen)
	}
	return nil
}

// ValidateLease checks MinLease <= lease <= MaxLease.
func ValidateLease(lease time.Duration) error {
	if lease < MinLease || lease > MaxLease {
		return fmt.Errorf("%w: %v, limit %v..%v", ErrLeaseOutOfRange, lease, MinLease, MaxLease)
	}
	return nil
}

// ValidateRetention checks 0 < retention <= MaxRetention.
func ValidateRetention(retention time.Duration) error {
	if retention <= 0 || retention > MaxRetention {
		return fmt.Errorf("%w: %v, limit 1ms..%v (400 days)", ErrRetention, retention, MaxRetention)
	}
	return nil
}

// ValidateRetryAfter checks 0 <= retryAfter <= MaxRetention.
func ValidateRetryAfter(d time.Duration) error {
	if d < 0 || d > MaxRetention {
		return fmt.Errorf("%w: %v, limit 0..%v", ErrRetryAfter, d, MaxRetention)
	}
	return nil
}

// ValidateMaxAttempts checks 1 <= n <= MaxAttemptsCap.
func ValidateMaxAttempts(n int) error {
	if n < 1 || n > MaxAttemptsCap {
		return fmt.Errorf("%w: %d, limit 1..%d", ErrMaxAttempts, n, MaxAttemptsCap)
	}
	return nil
}

// ValidateResult checks len(result) <= MaxResultLen.
func ValidateResult(result []byte) error {
	if len(result) > MaxResultLen {
		return fmt.Errorf("%w: %d bytes, limit %d (64 KiB)", ErrResultTooLarge, len(result), MaxResultLen)
	}
	return nil
}

// ValidateToken rejects the zero token, which no lease ever carries.
func ValidateToken(token uint64) error {
	if token == 0 {
		return fmt.Errorf("%w: token 0 is never granted (tokens come from Reserve)", ErrInvalidToken)
	}
	return nil
}

// ValidateBatchLen checks 1..MaxBatchOps operations.
func ValidateBatchLen(n int) error {
	switch {
	case n == 0:
		return fmt.Errorf("%w: a batch needs at least one operation", ErrEmptyBatch)
	case n > MaxBatchOps:
		return fmt.Errorf("%w: %d operations, limit %d", ErrBatchTooLarge, n, MaxBatchOps)
	}
	return nil
}
