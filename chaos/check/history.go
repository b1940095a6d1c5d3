package check

import (
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder collects a concurrent history. Clients call Begin before sending
// an operation and End or Unknown on the returned Call once they know what
// became of it. It is safe for concurrent use.
type Recorder struct {
	start time.Time // monotonic origin of the timestamps

	mu  sync.Mutex
	ops []porcupine.Operation
}

// NewRecorder starts an empty history.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Call is one operation in flight.
type Call struct {
	r      *Recorder
	client int
	in     Input
	call   int64
	meta   string
	closed sync.Once
}

// Begin records the invocation of in by client (a small integer: one lane
// of the visualization per client).
func (r *Recorder) Begin(client int, in Input) *Call {
	return &Call{r: r, client: client, in: in, call: r.now()}
}

func (r *Recorder) now() int64 { return int64(time.Since(r.start)) }

// Note attaches text shown with the operation in the visualization (for
// example the error of an unknown outcome).
func (c *Call) Note(format string, args ...any) { c.meta = fmt.Sprintf(format, args...) }

// End records the grid's answer. Only the first End or Unknown counts.
func (c *Call) End(out Output) {
	ret := c.r.now()
	c.closed.Do(func() { c.r.add(c, out, ret) })
}

// Unknown records that the client cannot tell whether the operation took
// effect. Its end stays open: it may take effect at any time after its call.
// A Get with an unknown outcome changed nothing and is left out.
func (c *Call) Unknown() {
	c.closed.Do(func() {
		if c.in.Kind == KindGet {
			return
		}
		c.r.add(c, Output{Unknown: true}, math.MaxInt64)
	})
}

func (r *Recorder) add(c *Call, out Output, ret int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var meta any
	if c.meta != "" {
		meta = c.meta
	}
	r.ops = append(r.ops, porcupine.Operation{
		ClientId: c.client, Input: c.in, Call: c.call, Output: out, Return: ret, Metadata: meta,
	})
}

// Operations returns the history so far: a copy, with Input.Horizon set on
// the operations whose outcome is unknown to the largest stamp answered in
// the history. Operations still in flight (neither End nor Unknown) are not
// in it: call it once every client has stopped, and record those that were
// abandoned as Unknown.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	ops := append([]porcupine.Operation(nil), r.ops...)
	r.mu.Unlock()
	return withHorizon(ops)
}

// withHorizon sets Input.Horizon of the unknown operations of ops.
func withHorizon(ops []porcupine.Operation) []porcupine.Operation {
	var horizon int64
	for _, op := range ops {
		if o := op.Output.(Output); !o.Unknown {
			horizon = max(horizon, o.Now)
		}
	}
	for i, op := range ops {
		if op.Output.(Output).Unknown {
			in := op.Input.(Input)
			in.Horizon = horizon
			ops[i].Input = in
		}
	}
	return ops
}

// Stats counts the operations of a history.
type Stats struct {
	Ops, Unknown, Keys int
	// Cold counts the answers the cold tier gave.
	Cold      int
	ByOutcome map[string]int
}

// Count describes a history.
func Count(ops []porcupine.Operation) Stats {
	st := Stats{Ops: len(ops), ByOutcome: map[string]int{}}
	keys := map[string]bool{}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		keys[in.Key] = true
		if out.Unknown {
			st.Unknown++
			st.ByOutcome[in.Kind.String()+" unknown"]++
			continue
		}
		st.ByOutcome[in.Kind.String()+" "+out.Outcome.String()]++
		if out.Cold {
			st.Cold++
		}
	}
	st.Keys = len(keys)
	return st
}

// Verdict is the result of Linearizable.
type Verdict struct {
	Result porcupine.CheckResult
	// Visualization is the HTML file written for an Illegal history, "" when
	// none was written.
	Visualization string
	Elapsed       time.Duration
}

// Linearizable checks ops against Model within timeout. When the history is not
// linearizable and dir is not empty, it writes porcupine's visualization
// (open it in a browser: each key a partition, the longest linearizable
// prefix and where it fails) to dir/name.html. An Unknown result means the
// search timed out: not a pass.
func Linearizable(ops []porcupine.Operation, timeout time.Duration, dir, name string) (Verdict, error) {
	model := Model()
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(model, ops, timeout)
	v := Verdict{Result: res, Elapsed: time.Since(start)}
	if res != porcupine.Illegal || dir == "" {
		return v, nil
	}
	// Again, keeping what the visualization needs.
	_, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	path := filepath.Join(dir, name+".html")
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return v, fmt.Errorf("check: visualization: %w", err)
	}
	v.Visualization = path
	return v, nil
}
