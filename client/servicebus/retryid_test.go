package servicebus

import (
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// TestRetryID: a copy's MessageID is the original's with /retry-<n>, or a
// hash of it where that would pass Service Bus's 128 characters; the same
// for the same original and n.
func TestRetryID(t *testing.T) {
	if got := retryID("order-1", 2); got != "order-1/retry-2" {
		t.Errorf("retryID(order-1, 2) = %q", got)
	}
	long := strings.Repeat("x", 125)
	a, b := retryID(long, 1), retryID(long, 1)
	if a != b || len(a) > maxMessageIDLen || a == retryID(long+"y", 1) || !strings.HasSuffix(a, "/retry-1") {
		t.Errorf("retryID of a 125-character id: %q (%d characters), again %q", a, len(a), b)
	}
	// A copy of a copy counts on from the original.
	first := copyOf(&azservicebus.ReceivedMessage{MessageID: "m", ApplicationProperties: map[string]any{}})
	second := copyOf(&azservicebus.ReceivedMessage{MessageID: *first.MessageID, ApplicationProperties: first.ApplicationProperties})
	if *first.MessageID != "m/retry-1" || *second.MessageID != "m/retry-2" || second.ApplicationProperties[RetryOfProperty] != "m" {
		t.Errorf("copies: %q then %q (%v)", *first.MessageID, *second.MessageID, second.ApplicationProperties)
	}
}
