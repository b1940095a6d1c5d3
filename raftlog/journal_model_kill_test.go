package raftlog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const modelChildEnv = "RAFTLOG_TEST_MODEL_CHILD"

// killSegmentSize is small, so that the child rolls, copies forward and
// removes segments while it runs.
const killSegmentSize = 16 << 10

// The crash and corruption model with real processes and files: a child
// runs the model's writers on a journal and reports each operation it
// begins, each it is told is done and each frame synced; it is killed
// (SIGKILL) at a random point. A kill loses nothing the kernel holds, so
// the parent then makes what a power cut at that moment leaves: the bytes
// written after the last sync it heard of are torn, sector by sector, and
// a segment made since may be gone. Sometimes it flips a bit or zeroes a
// sector too. The reopened journal must hold each group's acknowledged
// operations (and perhaps the one in flight), or refuse with ErrCorrupt
// when damaged.
func TestJournalCrashModelKill(t *testing.T) {
	if arg := os.Getenv(modelChildEnv); arg != "" {
		modelChild(arg)
		return
	}
	runs := 4
	if *long {
		runs = 60
	}
	var out crashOutcome
	for seed := range uint64(runs) {
		runKillCrash(t, seed, &out)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d kills: %d reopened after the power cut alone (%d cutting a torn tail), %d after damage too, %d refused with ErrCorrupt (damage only)",
		runs, out.clean, out.cut, out.damaged, out.refused)
}

// modelChild runs the writers on the journal in dir (arg is "seed dir")
// until it is killed, and prints what happens, a line a write.
func modelChild(arg string) {
	seedText, dir, _ := strings.Cut(arg, " ")
	seed, _ := strconv.ParseUint(seedText, 10, 64)
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	j, err := OpenJournal(dir, JournalOptions{SegmentSize: killSegmentSize,
		afterSync: func(seg uint64, end int64) { say("synced %d %d", seg, end) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var wg sync.WaitGroup
	for id := uint64(1); id <= modelGroups; id++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, id))
			gen, g := modelGen{group: id}, j.Group(id)
			// Bounded, so an orphaned child cannot run forever.
			for range 200_000 {
				first, _ := g.FirstIndex()
				last, _ := g.LastIndex()
				o := gen.next(rng, first, last)
				say("begin %v", o)
				if err := o.do(g); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				say("ack %v", o)
			}
		})
	}
	wg.Wait()
	os.Exit(0)
}

// runKillCrash runs one child, kills it, makes the power cut and checks
// the reopened journal.
func runKillCrash(t *testing.T, seed uint64, out *crashOutcome) {
	rng := rand.New(rand.NewPCG(seed, 0x4b111))
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournalCrashModelKill$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s", modelChildEnv, seed, dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	acked := make([][]mop, modelGroups+1)
	flying := make([]*mop, modelGroups+1)
	var syncedSeg, syncedEnd uint64
	read := func(line string) {
		kind, rest, _ := strings.Cut(line, " ")
		switch kind {
		case "synced":
			if _, err := fmt.Sscanf(rest, "%d %d", &syncedSeg, &syncedEnd); err != nil {
				t.Fatalf("child said %q: %v", line, err)
			}
		case "begin", "ack":
			o, err := parseMop(rest)
			if err != nil {
				t.Fatal(err)
			}
			if kind == "begin" {
				flying[o.group] = &o
			} else {
				acked[o.group], flying[o.group] = append(acked[o.group], o), nil
			}
		}
	}
	killAfter := 200 + rng.IntN(4000)
	sc := bufio.NewScanner(stdout)
	for n := 0; n < killAfter && sc.Scan(); n++ {
		read(sc.Text())
	}
	_ = cmd.Process.Kill() // SIGKILL: no deferred Close, no flush
	// What the child wrote before it died is still in the pipe.
	for sc.Scan() {
		read(sc.Text())
	}
	_ = cmd.Wait()
	if syncedSeg == 0 {
		t.Fatalf("seed %d: the child synced nothing; stderr:\n%s", seed, stderr.String())
	}
	powerCut(t, dir, syncedSeg, int64(syncedEnd), rng)
	segs := map[uint64][]byte{}
	for _, p := range segments(t, dir) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		segs[segmentID(t, p)] = data
	}
	hurt := damageSegments(segs, rng)
	for id, data := range segs {
		if err := os.WriteFile(filepath.Join(dir, segmentName(id)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var logged strings.Builder
	j, err := OpenJournal(dir, JournalOptions{SegmentSize: killSegmentSize, Logger: builderLogger{&logged}})
	if err != nil {
		if hurt != "" && errors.Is(err, ErrCorrupt) {
			out.refused++
			return
		}
		t.Fatalf("seed %d: open after the kill and power cut (damage: %q): %v", seed, hurt, err)
	}
	defer j.Close()
	if hurt != "" {
		out.damaged++
	} else {
		out.clean++
	}
	if strings.Contains(logged.String(), "cutting a torn tail") {
		out.cut++
	}
	for id := 1; id <= modelGroups; id++ {
		if d := checkGroup(j.Group(uint64(id)), acked[id], flying[id]); d != "" {
			t.Fatalf("seed %d, killed after %d lines, synced to %d:%d, damage %q: group %d after reopen %s: an acknowledged write lost or one never made (log: %s)",
				seed, killAfter, syncedSeg, syncedEnd, hurt, id, d, logged.String())
		}
	}
}

// powerCut makes in dir what a power cut leaves when segment seg was
// synced up to end: each sector written after that is kept or lost (a
// torn write), and a segment made after it may be gone (its directory
// entry unsynced).
func powerCut(t *testing.T, dir string, seg uint64, end int64, rng *rand.Rand) {
	for _, p := range segments(t, dir) {
		id := segmentID(t, p)
		if id < seg {
			continue
		}
		from := end
		if id > seg {
			from = 0
			if rng.IntN(3) == 0 {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				continue
			}
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		for s := from &^ (sectorSize - 1); s < int64(len(data)); s += sectorSize {
			lo, hi := max(s, from), min(s+sectorSize, int64(len(data)))
			if rng.IntN(2) == 0 {
				clear(data[lo:hi])
			}
		}
		if _, err := f.WriteAt(data[from:], from); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}
