package gridtest

import (
	"strings"
	"sync"
)

// logTailLines is how many of the nodes' last log lines a cluster keeps
// for a failed test: enough for the seconds before a wait ran out.
const logTailLines = 3000

// logTail is an io.Writer that keeps the last lines written to it, for the
// nodes' loggers (slog writes one record per Write). A test that fails
// shows them: a wait that ran out on a loaded machine says why.
type logTail struct {
	mu    sync.Mutex
	lines []string // a ring of at most cap(lines) entries
	next  int      // where the next line goes once the ring is full
}

func newLogTail(n int) *logTail { return &logTail{lines: make([]string, 0, n)} }

func (l *logTail) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < cap(l.lines) {
		l.lines = append(l.lines, line)
	} else {
		l.lines[l.next] = line
		l.next = (l.next + 1) % len(l.lines)
	}
	return len(p), nil
}

// String returns the lines kept, oldest first.
func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for i := range l.lines {
		b.WriteString(l.lines[(l.next+i)%len(l.lines)])
		b.WriteByte('\n')
	}
	return b.String()
}
