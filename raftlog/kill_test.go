package raftlog

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

const killChildEnv = "RAFTLOG_TEST_KILL_CHILD_DIR"

// TestAckedWritesSurviveKill runs a child process that stores entries in a
// Journal, from two groups at once, and prints "acked N" once both groups'
// writes of N returned; it SIGKILLs the child and checks that every
// acknowledged entry and stable value is there after reopening. (A process
// kill does not lose the OS page cache, so this checks that writes reach
// the segment file before StoreLogs returns; TestJournalWritesAreSynced
// checks that they are fsynced.) Small segments make the child roll and
// remove segments while it runs.
func TestAckedWritesSurviveKill(t *testing.T) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		killChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAckedWritesSurviveKill$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // if we fail before the kill below
	const want = 1000
	var acked uint64
	sc := bufio.NewScanner(stdout)
	for acked < want && sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			if acked, err = strconv.ParseUint(n, 10, 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = cmd.Process.Kill() // SIGKILL: no deferred Close, no flush
	_ = cmd.Wait()
	if acked < want {
		t.Fatalf("child stopped after %d acks; stderr:\n%s", acked, stderr.String())
	}

	j := openJournal(t, dir, killJournalOptions)
	for id := uint64(1); id <= 2; id++ {
		g := j.Group(id)
		last, err := g.LastIndex()
		if err != nil || last < acked {
			t.Fatalf("group %d: LastIndex after kill = %d, %v; want >= %d acked", id, last, err, acked)
		}
		first, _ := g.FirstIndex()
		// The child deletes only entries killKeep behind its newest, which
		// is at most acked+1.
		if first > acked+2-killKeep {
			t.Fatalf("group %d: first entry after kill %d; the child kept %d entries behind %d", id, first, killKeep, acked)
		}
		checkRange(t, g, first, last)
		if n, err := g.GetUint64([]byte("acked")); err != nil || n < acked {
			t.Fatalf("group %d: stable value after kill = %d, %v; want >= %d", id, n, err, acked)
		}
	}
}

// killJournalOptions are small segments, so the child rolls often.
var killJournalOptions = JournalOptions{SegmentSize: 16 << 10}

// killKeep is how many entries the child keeps when it compacts.
const killKeep = 50

func killChild(dir string) {
	j, err := OpenJournal(dir, killJournalOptions)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// Bounded, so an orphaned child cannot run forever.
	for i := uint64(1); i <= 100_000; i++ {
		var wg sync.WaitGroup
		for id := uint64(1); id <= 2; id++ {
			wg.Go(func() {
				g := j.Group(id)
				err := g.StoreLogs([]*raft.Log{{Index: i, Term: 1, Data: payload(id, i)}})
				if err == nil {
					err = g.SetUint64([]byte("acked"), i)
				}
				if err == nil && i%100 == 0 {
					err = g.DeleteRange(1, i-killKeep)
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
			})
		}
		wg.Wait()
		fmt.Fprintf(os.Stdout, "acked %d\n", i)
	}
	os.Exit(0)
}
