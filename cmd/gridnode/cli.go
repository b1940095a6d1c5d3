package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/digest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The operator CLI: one verb per grid operation, run against a node's client
// port through the client package. Exit codes: 0 when the grid answered,
// whatever the outcome, but for LEASE_LOST; 1 for invalid input (flags, or
// the grid's InvalidArgument / ResourceExhausted); 2 when the grid could not
// be reached (unavailable, timed out, dial failure) or failed otherwise; 3
// when a settle or extend was answered LEASE_LOST: the token does not hold
// the lease and nothing changed (stderr says so too), so that a script's
// "gridnode complete ... && next-step" stops there.
const (
	exitOK          = 0
	exitInvalid     = 1
	exitUnreachable = 2
	exitLeaseLost   = 3

	defaultCLIAddr    = "127.0.0.1:7420"
	defaultCLITimeout = 5 * time.Second
)

// cliRetry is the CLI's retry policy for a call of at most timeout: it
// resends an operation the grid could not take (a leader election after a
// node died, a send whose outcome is unknown: every operation is
// idempotent) for all but the last second of it, or half of it, so that a
// failover costs a call time, not an error, and an unreachable grid still
// fails with its own error within --timeout.
func cliRetry(timeout time.Duration) client.RetryPolicy {
	return client.RetryPolicy{Budget: max(timeout/2, timeout-time.Second), BaseBackoff: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}
}

// envAddr is the environment variable of the CLI's default --addr.
const envAddr = "GRID_ADDR"

// addAddrFlag adds --addr, the client addresses of the grid's nodes:
// $GRID_ADDR when set, else defaultCLIAddr.
func addAddrFlag(fs *flag.FlagSet, lookup func(string) (string, bool)) *string {
	def := defaultCLIAddr
	if v, ok := lookup(envAddr); ok && strings.TrimSpace(v) != "" {
		def = v
	}
	return fs.String("addr", def, "client addresses of grid nodes, comma-separated: the CLI asks them for the cluster map and sends each operation to its shard's leader ("+envAddr+" sets the default)")
}

// cliVerb is one verb of the CLI.
type cliVerb struct {
	usage   string
	summary string
	keyed   bool // takes --ns and --key
	token   bool // takes --token
	// bind registers the verb's own flags; after parsing, the returned func
	// validates them and yields the operation to run.
	bind func(fs *flag.FlagSet) func() (cliOp, error)
	// custom, instead of bind, is for a verb with its own output (audit).
	custom func(fs *flag.FlagSet) func() (cliCustom, error)
	// timeout is the default of --timeout; zero means defaultCLITimeout.
	timeout time.Duration
	// tool: the verb watches or runs the grid instead of operating on
	// keys, and its calls say so (gridpb.CallerTool), so that the nodes
	// leave them out of their client RPC metrics.
	tool bool
}

// cliCustom runs a verb with its own output and returns the exit code.
type cliCustom func(ctx context.Context, c *client.Client, o cliOutput) int

// cliOp runs one operation of a parsed invocation.
type cliOp func(ctx context.Context, c *client.Client, a cliArgs) (client.Result, error)

// cliArgs are the flags every keyed verb shares.
type cliArgs struct {
	ns, key   string
	token     uint64
	digest    string // get: a record digest instead of --ns and --key
	showToken bool   // get: the operator view, with the record's token
	// asked, for get, is filled with the shard the node was asked.
	asked *cliAsked
}

// cliAsked is where a get looked for the record: the shard its key (or
// its entity, when named) places it on, by the node's map.
type cliAsked struct {
	shard  int
	entity string // "" when the get named no entity
	ok     bool   // the node gave its map: shard is known
}

var cliTable = map[string]cliVerb{
	"reserve": {
		usage:   "reserve --ns NS --key KEY [--lease 30s] [--max-attempts 5] [--fingerprint HEX] [--entity E --version N] [--request-id ID]",
		summary: "Take the processing lease of a key, or say why not (BUSY, DUPLICATE, POISONED, STALE, MISMATCH).",
		keyed:   true,
		bind:    bindReserve,
	},
	"complete": {
		usage:   "complete --ns NS --key KEY --token N [--retain 168h] [--result TEXT] [--entity E]",
		summary: "Settle a held key as COMPLETED; it answers DUPLICATE, with the result, for the retention.",
		keyed:   true, token: true,
		bind: bindComplete,
	},
	"fail": {
		usage:   "fail --ns NS --key KEY --token N [--retry-after D] [--poison] [--entity E]",
		summary: "Settle a held key as FAILED (retryable after a backoff) or POISONED.",
		keyed:   true, token: true,
		bind: bindFail,
	},
	"release": {
		usage:   "release --ns NS --key KEY --token N [--entity E]",
		summary: "Give a held key back without counting an attempt.",
		keyed:   true, token: true,
		bind: bindEntityOnly(settleEntityFlag, func(ctx context.Context, c *client.Client, a cliArgs, e client.EntityOption) (client.Result, error) {
			return c.Release(ctx, a.ns, a.key, a.token, e)
		}),
	},
	"extend": {
		usage:   "extend --ns NS --key KEY --token N [--lease 30s] [--entity E]",
		summary: "Renew a held lease to now + lease; a lease never gets shorter (the answer's deadline is the lease's).",
		keyed:   true, token: true,
		bind: bindExtend,
	},
	"get": {
		usage:   "get (--ns NS --key KEY [--entity E] | --digest HEX) [--stale-ok] [--show-token]",
		summary: "Show the record of a key (ABSENT when there is none), the tier that held it, when it was completed, its attempts and result; its token only with --show-token (operator view).",
		keyed:   true,
		bind:    bindGet,
	},
	"forget": {
		usage:   "forget --ns NS --key KEY [--entity E]",
		summary: "Remove the record of a key so that its message is processed again.",
		keyed:   true,
		bind: bindEntityOnly(entityFlag, func(ctx context.Context, c *client.Client, a cliArgs, e client.EntityOption) (client.Result, error) {
			return c.Forget(ctx, a.ns, a.key, e)
		}),
	},
	"status": {
		usage:   "status",
		summary: "Show the node and its shards: Raft state, leader, keys per tier, applied index, stamp.",
		tool:    true,
	},
	"audit": {
		usage:   "audit --ns NS [--since 72h|TIME] [--until TIME] [--limit N]",
		summary: "List the COMPLETED and POISONED records of a namespace settled in a time range, from the node's cold tier (keys as hex digests; follow up with get --digest).",
		custom:  bindAudit,
		tool:    true,
	},
	"locate": {
		usage:   "locate --ns NS --key KEY [--entity E]",
		summary: "Show which shard serves a key (digest, slot, shard) and the nodes that lead and hold it, by the cluster map of the node at --addr.",
		custom:  bindLocate,
		tool:    true,
	},
	"drain": {
		usage:   "drain [--node ID] [--wait]",
		summary: "Move every replica off a cluster node (default: the one --addr points at), then remove it from the cluster map; --wait follows it until removed.",
		custom:  bindDrain,
		timeout: time.Minute,
		tool:    true,
	},
}

func (v cliVerb) defaultTimeout() time.Duration {
	if v.timeout == 0 {
		return defaultCLITimeout
	}
	return v.timeout
}

// cliVerbs lists the CLI verbs, in the order of a help text.
func cliVerbs() []string {
	return []string{"reserve", "complete", "fail", "release", "extend", "get", "forget", "status", "audit", "locate", "drain"}
}

// cliUsage is the usage line and summary of a verb ("" for an unknown one).
// Every verb also takes --addr, --no-routing, --json and --timeout.
func cliUsage(verb string) string {
	v, ok := cliTable[verb]
	if !ok {
		return ""
	}
	return fmt.Sprintf("gridnode %s [--addr HOST:PORT[,HOST:PORT...]] [--no-routing] [--json] [--timeout %v]\n  %s", v.usage, v.defaultTimeout(), v.summary)
}

// runCLI runs one verb with its arguments and returns the exit code.
func runCLI(verb string, args []string, stdout, stderr io.Writer) int {
	v, ok := cliTable[verb]
	if !ok {
		fmt.Fprintf(stderr, "gridnode: unknown command %q (commands: serve, %s)\n", verb, strings.Join(cliVerbs(), ", "))
		return exitInvalid
	}
	fs := flag.NewFlagSet("gridnode "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s\n\nflags:\n", cliUsage(verb))
		fs.PrintDefaults()
	}
	addr := addAddrFlag(fs, os.LookupEnv)
	noRouting := fs.Bool("no-routing", false, "send every call to the first --addr, which forwards each operation to its shard's leader (for a grid whose nodes' advertised addresses this machine cannot reach)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	timeout := fs.Duration("timeout", v.defaultTimeout(), "give up after this long")
	tlsFlags := addTLSFlags(fs)
	var a cliArgs
	if v.keyed {
		fs.StringVar(&a.ns, "ns", "", "namespace (required)")
		fs.StringVar(&a.key, "key", "", "idempotency key (required)")
	}
	if v.token {
		fs.Uint64Var(&a.token, "token", 0, "fencing token returned by reserve (required)")
	}
	if verb == "get" {
		fs.StringVar(&a.digest, "digest", "", "the record's digest (32 hex digits, as audit prints it) instead of --ns and --key")
		fs.BoolVar(&a.showToken, "show-token", false, "operator view: also show the record's token, which lets whoever has it settle the holder's lease")
	}
	var bound func() (cliOp, error)
	if v.bind != nil {
		bound = v.bind(fs)
	}
	var custom func() (cliCustom, error)
	if v.custom != nil {
		custom = v.custom(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitInvalid // flag has printed the error and the usage
	}
	op, err := validateCLI(fs, v, a, *timeout, bound)
	var run cliCustom
	if err == nil && custom != nil {
		run, err = custom()
	}
	if err != nil {
		fmt.Fprintf(stderr, "gridnode %s: %v\nusage: %s\n", verb, err, cliUsage(verb))
		return exitInvalid
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// A get shows no token unless asked: the grid hides it, and so does the
	// CLI, whatever a node answers.
	out := cliOutput{verb: verb, json: *asJSON, token: verb != "get" || a.showToken, stdout: stdout, stderr: stderr}
	// The CLI is a client like any consumer's: it asks the nodes at --addr
	// for the cluster map and sends each operation to its shard's leader,
	// riding through a failover within its retry budget. Status, audit and
	// drain go to the first --addr, whose answers they are.
	dialOpts := []client.Option{client.WithBatching(false), client.WithRetryPolicy(cliRetry(*timeout))}
	if *noRouting {
		dialOpts = append(dialOpts, client.WithoutRouting())
	}
	more, err := tlsFlags.options(os.LookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "gridnode %s: %v\n", verb, err)
		return exitInvalid
	}
	dialOpts = append(dialOpts, more...)
	if v.tool {
		dialOpts = append(dialOpts, client.WithDialOptions(gridpb.WithCaller(gridpb.CallerTool)...))
	}
	c, err := client.Dial(ctx, *addr, dialOpts...)
	if err != nil {
		return out.fail(fmt.Errorf("cannot reach the grid at %s: %w", *addr, err), exitUnreachable)
	}
	defer c.Close()

	if run != nil {
		return run(ctx, c, out)
	}
	if op == nil {
		return runStatus(ctx, c, *addr, out)
	}
	if verb == "get" && a.digest == "" {
		a.asked = &cliAsked{}
		out.asked = a.asked
	}
	r, err := op(ctx, c, a)
	if err != nil && !(errors.Is(err, client.ErrLeaseLost) && r.Outcome == client.OutcomeLeaseLost) {
		return out.fail(fmt.Errorf("grid at %s: %w", *addr, err), cliExitCode(err))
	}
	code := out.result(r, verb == "forget")
	if r.Outcome == client.OutcomeLeaseLost {
		// The grid answered, and the answer is that nothing was applied.
		fmt.Fprintf(stderr, "gridnode %s: LEASE_LOST: token %d does not hold the lease of %s/%s (taken over after it expired, settled with another token, or never granted): nothing changed\n",
			verb, a.token, a.ns, a.key)
		if code == exitOK {
			code = exitLeaseLost
		}
	}
	return code
}

// validateCLI checks what every verb shares, then the verb's own flags.
func validateCLI(fs *flag.FlagSet, v cliVerb, a cliArgs, timeout time.Duration, bound func() (cliOp, error)) (cliOp, error) {
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case timeout <= 0:
		return nil, fmt.Errorf("--timeout must be positive, got %v", timeout)
	case a.digest != "" && (a.ns != "" || a.key != ""):
		return nil, errors.New("--digest replaces --ns and --key: give one or the other")
	case v.keyed && a.ns == "" && a.digest == "":
		return nil, errors.New("missing --ns")
	case v.keyed && a.key == "" && a.digest == "":
		return nil, errors.New("missing --key")
	case v.token && a.token == 0:
		return nil, errors.New("missing --token (the token reserve printed)")
	}
	if bound == nil {
		return nil, nil
	}
	return bound()
}

// cliExitCode classifies the error of a call the grid refused or never
// answered. A request the grid cannot take as asked (an unknown node, a
// cluster verb sent to a standalone node) is invalid input too.
func cliExitCode(err error) int {
	if errors.Is(err, client.ErrInvalidArgument) || errors.Is(err, client.ErrLimitExceeded) {
		return exitInvalid
	}
	switch status.Code(err) {
	case codes.NotFound, codes.FailedPrecondition:
		return exitInvalid
	}
	return exitUnreachable
}

func bindReserve(fs *flag.FlagSet) func() (cliOp, error) {
	lease := fs.Duration("lease", client.DefaultLease, "processing lease, 100ms..1h")
	maxAttempts := fs.Int("max-attempts", client.DefaultMaxAttempts, "attempts before the key is poisoned, 1..100")
	fingerprint := fs.String("fingerprint", "", "64-bit payload fingerprint, in hex")
	entity := fs.String("entity", "", "entity the message changes (with --version)")
	version := fs.Uint64("version", 0, "version of the entity (with --entity)")
	requestID := fs.String("request-id", "", "names this logical reserve (<= 64 bytes): sent again with the same id, it answers the same grant (ACQUIRED, same token) instead of BUSY")
	return func() (cliOp, error) {
		if *lease <= 0 {
			return nil, fmt.Errorf("--lease must be positive, got %v", *lease)
		}
		if *maxAttempts < 1 {
			return nil, fmt.Errorf("--max-attempts must be at least 1, got %d", *maxAttempts)
		}
		opts := []client.ReserveOption{client.WithLease(*lease), client.WithMaxAttempts(*maxAttempts)}
		if *fingerprint != "" {
			fp, err := parseHex64(*fingerprint)
			if err != nil {
				return nil, fmt.Errorf("invalid --fingerprint: %w", err)
			}
			opts = append(opts, client.WithFingerprint(fp))
		}
		if (*entity == "") != (*version == 0) {
			return nil, errors.New("--entity and --version go together (version >= 1)")
		}
		if *entity != "" {
			opts = append(opts, client.WithEntity(*entity, *version))
		}
		if *requestID != "" {
			opts = append(opts, client.WithRequestID(*requestID))
		}
		return func(ctx context.Context, c *client.Client, a cliArgs) (client.Result, error) {
			return c.Reserve(ctx, a.ns, a.key, opts...)
		}, nil
	}
}

func bindComplete(fs *flag.FlagSet) func() (cliOp, error) {
	retain := fs.Duration("retain", client.DefaultRetention, "how long the key answers DUPLICATE, up to 400 days (9600h)")
	result := fs.String("result", "", "result stored for duplicates (<= 64 KiB)")
	entity := settleEntityFlag(fs)
	return func() (cliOp, error) {
		if *retain <= 0 {
			return nil, fmt.Errorf("--retain must be positive, got %v", *retain)
		}
		opts := []client.CompleteOption{client.WithRetention(*retain), client.ForEntity(*entity)}
		if *result != "" {
			opts = append(opts, client.WithResult([]byte(*result)))
		}
		return func(ctx context.Context, c *client.Client, a cliArgs) (client.Result, error) {
			return c.Complete(ctx, a.ns, a.key, a.token, opts...)
		}, nil
	}
}

func bindFail(fs *flag.FlagSet) func() (cliOp, error) {
	retryAfter := fs.Duration("retry-after", 0, "retry not before this delay (default: the grid's backoff by attempt)")
	poison := fs.Bool("poison", false, "poison the key now")
	entity := settleEntityFlag(fs)
	return func() (cliOp, error) {
		opts := []client.FailOption{client.ForEntity(*entity)}
		if flagSet(fs, "retry-after") {
			if *retryAfter < 0 {
				return nil, fmt.Errorf("--retry-after must not be negative, got %v", *retryAfter)
			}
			if *poison {
				return nil, errors.New("--retry-after and --poison exclude each other")
			}
			opts = append(opts, client.WithRetryAfter(*retryAfter))
		}
		if *poison {
			opts = append(opts, client.WithPoison())
		}
		return func(ctx context.Context, c *client.Client, a cliArgs) (client.Result, error) {
			return c.Fail(ctx, a.ns, a.key, a.token, opts...)
		}, nil
	}
}

func bindExtend(fs *flag.FlagSet) func() (cliOp, error) {
	lease := fs.Duration("lease", client.DefaultLease, "lease from now, 100ms..1h; shorter than what is left keeps the deadline")
	entity := settleEntityFlag(fs)
	return func() (cliOp, error) {
		if *lease <= 0 {
			return nil, fmt.Errorf("--lease must be positive, got %v", *lease)
		}
		return func(ctx context.Context, c *client.Client, a cliArgs) (client.Result, error) {
			return c.Extend(ctx, a.ns, a.key, a.token, *lease, client.ForEntity(*entity))
		}, nil
	}
}

func bindGet(fs *flag.FlagSet) func() (cliOp, error) {
	staleOK := fs.Bool("stale-ok", false, "allow a possibly stale read from this node's replica")
	entity := entityFlag(fs)
	return func() (cliOp, error) {
		opts := []client.GetOption{client.ForEntity(*entity)}
		if *staleOK {
			opts = append(opts, client.WithStaleOK())
		}
		return func(ctx context.Context, c *client.Client, a cliArgs) (client.Result, error) {
			if a.showToken {
				opts = append(opts, client.WithShowToken())
			}
			if a.digest != "" {
				d, err := digest.Parse(a.digest)
				if err != nil {
					return client.Result{}, fmt.Errorf("%w: --digest: %w", client.ErrInvalidArgument, err)
				}
				return c.GetDigest(ctx, d, opts...)
			}
			if a.asked != nil {
				// Which shard the node asks, for the answer to say: a key
				// reserved with an entity lives on the entity's shard.
				if loc, err := c.Locate(ctx, a.ns, a.key, client.ForEntity(*entity)); err == nil {
					*a.asked = cliAsked{shard: loc.Shard, entity: *entity, ok: true}
				}
			}
			return c.Get(ctx, a.ns, a.key, opts...)
		}, nil
	}
}

// bindEntityOnly binds a verb whose only own flag is --entity, made by
// flagOf.
func bindEntityOnly(flagOf func(*flag.FlagSet) *string, run func(context.Context, *client.Client, cliArgs, client.EntityOption) (client.Result, error)) func(*flag.FlagSet) func() (cliOp, error) {
	return func(fs *flag.FlagSet) func() (cliOp, error) {
		entity := flagOf(fs)
		return func() (cliOp, error) {
			return func(ctx context.Context, c *client.Client, a cliArgs) (client.Result, error) {
				return run(ctx, c, a, client.ForEntity(*entity))
			}, nil
		}
	}
}

func entityFlag(fs *flag.FlagSet) *string {
	return fs.String("entity", "", "entity the key was reserved with, if any (it selects the key's shard)")
}

// settleEntityFlag is --entity of complete, fail, release and extend: the
// token finds the key's shard, so the entity is not needed.
func settleEntityFlag(fs *flag.FlagSet) *string {
	return fs.String("entity", "", "entity the key was reserved with, if any: not needed, the token finds the key's shard")
}

// flagSet reports whether the flag was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// parseHex64 reads up to 16 hex digits, with an optional 0x.
func parseHex64(s string) (uint64, error) {
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if h == "" || len(h) > 16 {
		return 0, fmt.Errorf("%q: want 1..16 hex digits", s)
	}
	v, err := strconv.ParseUint(h, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: want 1..16 hex digits", s)
	}
	return v, nil
}

// cliOutput prints the answer of one invocation as a table or as one JSON
// object.
type cliOutput struct {
	verb           string
	json           bool
	token          bool // print the record's token (not for get without --show-token)
	stdout, stderr io.Writer
	asked          *cliAsked // get: the shard asked, when known
}

// cliGetJSON is the JSON shape of get's answer: the result, the shard the
// node asked, by what ("key" or "entity"), and a note when the answer may
// mislead (an ABSENT found by the key alone).
type cliGetJSON struct {
	cliResultJSON
	Shard   *int   `json:"shard,omitempty"`
	AskedBy string `json:"asked_by,omitempty"`
	Note    string `json:"note,omitempty"`
}

// getNote is what get adds to an ABSENT found by the key alone: a key
// reserved with an entity is on the entity's shard, which was not asked.
const getNote = "asked the key's own shard; a key reserved with --entity lives on its entity's shard: pass --entity to read it"

// where says which shard a get asked and by what, and the note to add.
func (a *cliAsked) where(r client.Result) (shard *int, by, note string) {
	if a == nil {
		return nil, "", ""
	}
	by = "key"
	if a.entity != "" {
		by = "entity"
	}
	if r.State == client.StateAbsent && a.entity == "" {
		note = getNote
	}
	if !a.ok {
		return nil, by, note
	}
	s := a.shard
	return &s, by, note
}

// cliResultJSON is the JSON shape of a result. Times are RFC 3339 in UTC,
// omitted when unset; retry_after is a Go duration ("1.5s").
type cliResultJSON struct {
	Outcome      string  `json:"outcome"`
	State        string  `json:"state"`
	Tier         string  `json:"tier,omitempty"`
	Token        *uint64 `json:"token,omitempty"` // nil: not shown (get without --show-token)
	Attempt      int     `json:"attempt"`
	Deadline     string  `json:"deadline,omitempty"`
	RetryAfter   string  `json:"retry_after,omitempty"`
	CompletedAt  string  `json:"completed_at,omitempty"`
	Result       *string `json:"result,omitempty"`
	ResultBase64 string  `json:"result_base64,omitempty"`
	Fingerprint  string  `json:"fingerprint,omitempty"`
	Existed      *bool   `json:"existed,omitempty"`
	Now          string  `json:"now,omitempty"`
}

type cliShardJSON struct {
	ID           uint32 `json:"id"`
	RaftState    string `json:"raft_state"`
	Leader       string `json:"leader"`
	Keys         uint64 `json:"keys"`
	HotBytes     uint64 `json:"hot_bytes"`
	AppliedIndex uint64 `json:"applied_index"`
	CommitIndex  uint64 `json:"commit_index"`
	LastIndex    uint64 `json:"last_index"`
	Term         uint64 `json:"term"`
	Stamp        string `json:"stamp,omitempty"`
	ColdKeys     uint64 `json:"cold_keys"`
	ColdBytes    uint64 `json:"cold_bytes"`
}

type cliStatusJSON struct {
	NodeID  string         `json:"node_id"`
	Version string         `json:"version,omitempty"`
	Slots   int            `json:"slots"`
	Now     string         `json:"now,omitempty"`
	Shards  []cliShardJSON `json:"shards"`
	cliClockJSON
	DiskFull bool `json:"disk_full"`
}

// cliClockJSON is a node's clock as its Status reports it (absent from
// an older node, which reports no bound).
type cliClockJSON struct {
	ClockOffsetMs    *int64 `json:"clock_offset_ms,omitempty"`
	MaxClockOffsetMs *int64 `json:"max_clock_offset_ms,omitempty"`
	ClockOK          *bool  `json:"clock_ok,omitempty"`
}

func clockJSON(s client.Status) cliClockJSON {
	if s.MaxClockOffset == 0 {
		return cliClockJSON{}
	}
	off, bound, ok := s.ClockOffset.Milliseconds(), s.MaxClockOffset.Milliseconds(), s.ClockOK
	return cliClockJSON{ClockOffsetMs: &off, MaxClockOffsetMs: &bound, ClockOK: &ok}
}

// clockLabel says what a node's Status tells of its clock: "ok (+3ms)",
// or "OUTSIDE (-1h0m0s): grants no lease", "-" from an older node. The
// offset is the median of its peers' clocks minus its own.
func clockLabel(s client.Status) string {
	if s.MaxClockOffset == 0 {
		return "-"
	}
	off := s.ClockOffset.String()
	if s.ClockOffset >= 0 {
		off = "+" + off
	}
	if s.ClockOK {
		return "ok (" + off + ")"
	}
	return "OUTSIDE (" + off + "): grants no lease"
}

// clockLines describes a node's clock for the status table: its offset to
// its peers (a cluster member) against the bound, and each shard it leads
// whose stamps are ahead of its clock by more than the bound (that shard
// grants no lease).
func clockLines(s client.Status) []string {
	if s.MaxClockOffset == 0 {
		return nil
	}
	head := fmt.Sprintf("clock %s to its peers, max clock offset %v", clockLabel(s), s.MaxClockOffset)
	if s.MapEpoch == 0 && s.ControlState == "" { // standalone: no peers
		state := "ok"
		if !s.ClockOK {
			state = "OUTSIDE: grants no lease"
		}
		head = fmt.Sprintf("clock %s, max clock offset %v", state, s.MaxClockOffset)
	}
	out := []string{head}
	for _, sh := range s.Shards {
		if lag := sh.Stamp.Sub(s.Now); sh.RaftState == "Leader" && lag > s.MaxClockOffset && !s.Now.IsZero() {
			out = append(out, fmt.Sprintf("shard %d: stamps %v ahead of this node's clock, beyond the max clock offset: it grants no lease", sh.ID, lag))
		}
	}
	return out
}

func cliTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func resultJSON(r client.Result, forget, token bool) cliResultJSON {
	j := cliResultJSON{
		Outcome:     r.Outcome.String(),
		State:       r.State.String(),
		Tier:        r.Tier.String(),
		Attempt:     r.Attempt,
		Deadline:    cliTime(r.Deadline),
		CompletedAt: cliTime(r.CompletedAt),
		Now:         cliTime(r.Now),
	}
	if r.RetryAfter > 0 {
		j.RetryAfter = r.RetryAfter.String()
	}
	if len(r.Result) > 0 {
		if utf8.Valid(r.Result) {
			s := string(r.Result)
			j.Result = &s
		} else {
			j.ResultBase64 = base64.StdEncoding.EncodeToString(r.Result)
		}
	}
	if r.HasFingerprint {
		j.Fingerprint = fmt.Sprintf("%016x", r.Fingerprint)
	}
	if forget {
		j.Existed = &r.Existed
	}
	if token {
		j.Token = &r.Token
	}
	return j
}

func (o cliOutput) result(r client.Result, forget bool) int {
	j := resultJSON(r, forget, o.token)
	shard, by, note := o.asked.where(r)
	if o.json {
		if o.asked != nil {
			return o.writeJSON(cliGetJSON{cliResultJSON: j, Shard: shard, AskedBy: by, Note: note})
		}
		return o.writeJSON(j)
	}
	tw := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	row("OUTCOME", j.Outcome)
	row("STATE", j.State)
	row("TIER", j.Tier)
	if j.Token != nil {
		row("TOKEN", strconv.FormatUint(*j.Token, 10))
	}
	row("ATTEMPT", strconv.Itoa(j.Attempt))
	row("DEADLINE", withRelative(j.Deadline, r.Deadline, r.Now))
	row("RETRY AFTER", j.RetryAfter)
	row("COMPLETED AT", j.CompletedAt)
	if j.Result != nil {
		row("RESULT", strconv.Quote(*j.Result))
	}
	row("RESULT (BASE64)", j.ResultBase64)
	row("FINGERPRINT", j.Fingerprint)
	if j.Existed != nil {
		row("EXISTED", strconv.FormatBool(*j.Existed))
	}
	row("GRID TIME", j.Now)
	if shard != nil {
		asked := fmt.Sprintf("%d (by the key)", *shard)
		if by == "entity" {
			asked = fmt.Sprintf("%d (by entity %s)", *shard, o.asked.entity)
		}
		row("SHARD ASKED", asked)
	}
	row("NOTE", note)
	return o.flush(tw)
}

// withRelative adds how far t is from the grid's now: "... (in 29.5s)".
func withRelative(s string, t, now time.Time) string {
	if s == "" || now.IsZero() {
		return s
	}
	if d := t.Sub(now); d < 0 {
		return fmt.Sprintf("%s (%v ago)", s, -d)
	}
	return fmt.Sprintf("%s (in %v)", s, t.Sub(now))
}

func (o cliOutput) status(s client.Status) int {
	j := cliStatusJSON{NodeID: s.NodeID, Version: s.Version, Slots: s.Slots, Now: cliTime(s.Now), Shards: []cliShardJSON{}, cliClockJSON: clockJSON(s),
		DiskFull: s.DiskFull}
	for _, sh := range s.Shards {
		j.Shards = append(j.Shards, cliShardJSON{
			ID: sh.ID, RaftState: sh.RaftState, Leader: sh.Leader, Keys: sh.Keys, HotBytes: sh.HotBytes,
			AppliedIndex: sh.AppliedIndex, CommitIndex: sh.CommitIndex, LastIndex: sh.LastIndex, Term: sh.Term,
			Stamp: cliTime(sh.Stamp), ColdKeys: sh.ColdKeys, ColdBytes: sh.ColdBytes,
		})
	}
	if o.json {
		return o.writeJSON(j)
	}
	fmt.Fprintf(o.stdout, "node %s  version %s  slots %d  time %s\n", j.NodeID, orDash(j.Version), j.Slots, orDash(j.Now))
	for _, l := range clockLines(s) {
		fmt.Fprintln(o.stdout, l)
	}
	if s.DiskFull {
		fmt.Fprintln(o.stdout, "disk below its reserve (--disk-reserve-bytes): new keys are refused until space is freed; in a cluster its shard leaderships go to nodes with room")
	}
	fmt.Fprintln(o.stdout)
	tw := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tRAFT STATE\tLEADER\tHOT KEYS\tCOLD KEYS\tAPPLIED INDEX\tSTAMP")
	for _, sh := range j.Shards {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%s\n", sh.ID, sh.RaftState, orDash(sh.Leader), sh.Keys, sh.ColdKeys, sh.AppliedIndex, orDash(sh.Stamp))
	}
	return o.flush(tw)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fail reports an error: on stderr, and with --json also as one JSON object
// {"error": ..., "exit_code": ...} on stdout.
func (o cliOutput) fail(err error, code int) int {
	fmt.Fprintf(o.stderr, "gridnode %s: %v\n", o.verb, err)
	if o.json {
		_ = json.NewEncoder(o.stdout).Encode(struct {
			Error    string `json:"error"`
			ExitCode int    `json:"exit_code"`
		}{err.Error(), code})
	}
	return code
}

func (o cliOutput) writeJSON(v any) int {
	if err := json.NewEncoder(o.stdout).Encode(v); err != nil {
		fmt.Fprintf(o.stderr, "gridnode %s: write output: %v\n", o.verb, err)
		return exitUnreachable
	}
	return exitOK
}

func (o cliOutput) flush(tw *tabwriter.Writer) int {
	if err := tw.Flush(); err != nil {
		fmt.Fprintf(o.stderr, "gridnode %s: write output: %v\n", o.verb, err)
		return exitUnreachable
	}
	return exitOK
}
