package ledger

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// fleet runs the consumer processes, restarting each when it ends, until
// it leaves or the fleet stops.
type fleet struct {
	self string
	args []string
	log  io.Writer

	mu      sync.Mutex
	members []*member
	done    bool
	exits   map[int]int // exit code -> count
	beside  []int       // handlers running beside the poisonous payment at each of its crashes
	wg      sync.WaitGroup
}

// member is one consumer's place in the fleet.
type member struct {
	cmd  *exec.Cmd // the running process, nil between two
	left bool
}

func newFleet(self string, args []string, n int, log io.Writer) *fleet {
	f := &fleet{self: self, args: args, log: log, exits: map[int]int{}}
	for range n {
		f.join()
	}
	return f
}

// join starts one more consumer and returns its index.
func (f *fleet) join() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := &member{}
	f.members = append(f.members, m)
	f.wg.Go(func() { f.supervise(m) })
	return len(f.members) - 1
}

// supervise runs m's consumer until it leaves or the fleet stops.
func (f *fleet) supervise(m *member) {
	for {
		cmd := exec.Command(f.self, f.args...)
		cmd.Env = append(os.Environ(), consumerEnv+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			fmt.Fprintf(f.log, "ledger: consumer stderr: %v\n", err)
			return
		}
		f.mu.Lock()
		if f.done || m.left {
			f.mu.Unlock()
			return
		}
		if err := cmd.Start(); err != nil {
			f.mu.Unlock()
			fmt.Fprintf(f.log, "ledger: start consumer: %v\n", err)
			return
		}
		m.cmd = cmd
		f.mu.Unlock()
		f.read(stderr)
		_ = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			fmt.Fprintf(f.log, "ledger: consumer %d ended: %v\n", cmd.Process.Pid, cmd.ProcessState)
		}
		f.mu.Lock()
		m.cmd = nil
		f.exits[cmd.ProcessState.ExitCode()]++
		stop := f.done || m.left
		f.mu.Unlock()
		if stop {
			return
		}
	}
}

// read passes a consumer's stderr on to the log until it closes, and
// notes what the poisonous payment's crashes left running.
func (f *fleet) read(r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		line := s.Text()
		fmt.Fprintln(f.log, line)
		if rest, ok := strings.CutPrefix(line, poisonousMark+" "); ok {
			n, _, _ := strings.Cut(rest, " ")
			if n, err := strconv.Atoi(n); err == nil {
				f.mu.Lock()
				f.beside = append(f.beside, n)
				f.mu.Unlock()
			}
		}
	}
	// A line past the scanner's limit ends the reading: drain the rest so
	// the consumer never blocks on a full pipe.
	_, _ = io.Copy(f.log, r)
}

// kill sends SIGKILL to consumer i; it is started again.
func (f *fleet) kill(i int) { f.signal(i, syscall.SIGKILL) }

// leave stops consumer i with SIGTERM for good.
func (f *fleet) leave(i int) {
	f.mu.Lock()
	f.members[i].left = true
	f.mu.Unlock()
	f.signal(i, syscall.SIGTERM)
}

func (f *fleet) signal(i int, sig syscall.Signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.members[i].cmd; c != nil && c.Process != nil {
		_ = c.Process.Signal(sig)
	}
}

// stop sends SIGTERM to every consumer and waits for them.
func (f *fleet) stop() {
	f.mu.Lock()
	if !f.done {
		f.done = true
		for _, m := range f.members {
			if m.cmd != nil && m.cmd.Process != nil {
				_ = m.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// exited is how many consumer processes ended with code.
func (f *fleet) exited(code int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exits[code]
}

// poisonousCrashes are the handlers running beside the poisonous payment
// at each crash it caused that the consumer reported.
func (f *fleet) poisonousCrashes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.beside...)
}
