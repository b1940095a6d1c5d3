package client_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks, after the tests, that no goroutine leaked: the client's
// and the in-process nodes' alike.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
