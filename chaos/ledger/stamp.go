package ledger

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"
)

// stamped writes to w, each line prefixed with the seconds since start:
// the run's log, and its consumers' lines, on one clock.
type stamped struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	mid   bool // the last write ended within a line
}

func newStamped(w io.Writer, start time.Time) *stamped { return &stamped{w: w, start: start} }

func (s *stamped) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b []byte
	for rest := p; len(rest) > 0; {
		if !s.mid {
			b = fmt.Appendf(b, "%7.1fs ", time.Since(s.start).Seconds())
		}
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			b, s.mid = append(b, rest...), true
			break
		}
		b, s.mid, rest = append(b, rest[:i+1]...), false, rest[i+1:]
	}
	if _, err := s.w.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}
