package dirlock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const childEnv = "DIRLOCK_TEST_CHILD_DIR"

// A second Acquire of a held directory fails and names the holder: in the
// same process, and from another process; once released, it succeeds.
func TestAcquireIsExclusive(t *testing.T) {
	if dir := os.Getenv(childEnv); dir != "" {
		_, err := Acquire(dir)
		fmt.Print(err)
		return
	}
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second Acquire in the process: %v; want ErrLocked naming pid %d", err, os.Getpid())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcquireIsExclusive$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(out), "directory in use") || !strings.Contains(string(out), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("another process locking the directory got %q; want a refusal naming pid %d", out, os.Getpid())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Close: %v", err)
	}
	l.Close()
}
