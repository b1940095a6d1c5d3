package tiering

import (
	"testing"

	"go.uber.org/goleak"
)

// Every Store a test opens is closed, and Close must stop what Pebble
// started for it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
