package workload

import (
	"testing"

	"go.uber.org/goleak"
)

// Every worker a run starts has returned when Run returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
