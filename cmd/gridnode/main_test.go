package main

import (
	"os"
	"testing"
)

// TestMain lets the tests run the real gridnode binary as a child process:
// the test binary re-executed with GRIDNODE_EXEC=1 is gridnode.
func TestMain(m *testing.M) {
	if os.Getenv("GRIDNODE_EXEC") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
