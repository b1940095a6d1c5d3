package machinelock

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

const childEnv = "MACHINELOCK_TEST_CHILD"

// An exclusive holder in another process keeps Shared waiting until it
// lets go; two shared holders do not wait for each other.
func TestExclusiveKeepsSharedWaiting(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		Exclusive(t)
		os.Stdout.WriteString("held\n")
		// Hold until the parent closes our stdin.
		_, _ = os.Stdin.Read(make([]byte, 1))
		return
	}
	t.Setenv("TMPDIR", t.TempDir())
	cmd := exec.Command(os.Args[0], "-test.run=^TestExclusiveKeepsSharedWaiting$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	buf := make([]byte, 5)
	if _, err := stdout.Read(buf); err != nil || string(buf) != "held\n" {
		t.Fatalf("child: %q, %v", buf, err)
	}
	got := make(chan struct{})
	go func() {
		t.Run("shared", func(t *testing.T) {
			Shared(t)
			Shared(t) // a second shared holder does not wait for the first
		})
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("Shared was granted while another process held the machine exclusively")
	case <-time.After(200 * time.Millisecond):
	}
	stdin.Close()
	<-got
}
