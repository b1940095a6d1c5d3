package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
)

// Limits and defaults of the client.
const (
	// MaxBatchSize is the grid's limit of operations in one Batch RPC.
	MaxBatchSize = digest.MaxBatchOps
	// maxBatchBytes keeps one Batch request under the grid's 4 MiB request
	// limit, with room for framing.
	maxBatchBytes = digest.MaxRequestBytes - 64<<10
	// maxRecvBytes fits a response of MaxBatchSize duplicates, each carrying
	// a 64 KiB stored result.
	maxRecvBytes = 96 << 20

	// DefaultLease is the lease of Reserve and Process when none is given:
	// the grid's.
	DefaultLease = digest.DefaultLease
	// DefaultMaxAttempts is the attempts of Process before a key is
	// poisoned: the grid's.
	DefaultMaxAttempts = digest.DefaultMaxAttempts
	// DefaultRetention is how long Process keeps a completed key: the
	// grid's.
	DefaultRetention = digest.DefaultRetention

	// DefaultRetryBudget is how long after its first send a call that finds
	// the grid unavailable is still sent again (DefaultRetryPolicy).
	DefaultRetryBudget = 10 * time.Second
	// DefaultSendTimeout bounds one send of an operation to one node of a
	// cluster (WithSendTimeout). A healthy leader answers a full batch well
	// within it, a group commit taking tens of milliseconds; a frozen or cut
	// off one never does, and the node is then avoided.
	DefaultSendTimeout = 1500 * time.Millisecond

	defaultMaxInFlight = 8
)

// DefaultRetryPolicy is the retry policy of a Client without WithRetryPolicy:
// sends for up to 10 s after the first one, with a backoff from 25 ms
// doubling up to 500 ms between them. An election of a shard's leader after
// its node died or froze takes about a second (a follower names the old
// leader for 0.5 to 1 s first), so the budget rides through one with room to
// spare.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Budget: DefaultRetryBudget, BaseBackoff: 25 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}
}

// RetryPolicy says how a call that found the grid unavailable is sent again,
// after a capped exponential backoff with jitter, always within the call's
// context:
//
//   - Budget > 0: while less than Budget has passed since the call's first
//     send (the send after the last backoff must start within it);
//   - Attempts > 0: up to Attempts sends in all;
//   - both: whichever bound comes first. Neither (or Attempts == 1) sends
//     once, without retries.
//
// One send follows the Redirects it gets (the node does not lead the shard,
// or is starting, not a member, removed) at once, up to 8, without a
// backoff; the policy counts and spaces the sends.
type RetryPolicy struct {
	Budget      time.Duration
	Attempts    int
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
}

// Validate reports a policy that cannot be used.
func (p RetryPolicy) Validate() error {
	if p.BaseBackoff < 0 || p.MaxBackoff < 0 || p.Budget < 0 || p.Attempts < 0 {
		return fmt.Errorf("%w: retry budget, attempts and backoff must not be negative", ErrInvalidArgument)
	}
	if p.MaxBackoff < p.BaseBackoff {
		return fmt.Errorf("%w: retry max backoff %v below base backoff %v", ErrInvalidArgument, p.MaxBackoff, p.BaseBackoff)
	}
	return nil
}

// again decides whether a call whose send number attempt (>= 1) failed as
// unavailable, elapsed after its first send, is sent again, and the most it
// waits before that send (backoff jitters below it). It is pure: the policy
// as data.
func (p RetryPolicy) again(attempt int, elapsed time.Duration) (ceiling time.Duration, ok bool) {
	if p.Budget <= 0 && p.Attempts <= 0 {
		return 0, false
	}
	if p.Attempts > 0 && attempt >= p.Attempts {
		return 0, false
	}
	ceiling = p.ceiling(attempt)
	if p.Budget > 0 {
		left := p.Budget - elapsed
		if left <= 0 {
			return 0, false
		}
		ceiling = min(ceiling, left)
	}
	return ceiling, true
}

// ceiling is the backoff before send number attempt+1 before jitter: the
// base doubled per attempt, capped.
func (p RetryPolicy) ceiling(attempt int) time.Duration {
	d := p.BaseBackoff
	for i := 1; i < attempt && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// backoff is the wait before send number attempt+1 (attempt >= 1): the
// ceiling jittered over its upper half so that clients that failed together
// do not come back together.
func (p RetryPolicy) backoff(attempt int) time.Duration { return jitter(p.ceiling(attempt)) }

// jitter draws a wait in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// config is what Dial builds from its options, starting from defaultConfig.
type config struct {
	batching    bool
	streaming   bool
	routing     bool
	maxBatch    int
	maxInFlight int
	retry       RetryPolicy
	sendTimeout time.Duration // 0: none
	dialOpts    []grpc.DialOption
	clock       func() time.Time
	tracer      trace.Tracer // nil: no spans (WithTracerProvider)
}

func defaultConfig() config {
	return config{
		batching:    true,
		streaming:   true,
		routing:     true,
		maxBatch:    MaxBatchSize,
		maxInFlight: defaultMaxInFlight,
		retry:       DefaultRetryPolicy(),
		sendTimeout: DefaultSendTimeout,
		clock:       time.Now,
	}
}

func (c *config) validate() error {
	if c.maxBatch < 1 || c.maxBatch > MaxBatchSize {
		return fmt.Errorf("%w: max batch size %d out of range 1..%d", ErrInvalidArgument, c.maxBatch, MaxBatchSize)
	}
	if c.maxInFlight < 1 {
		return fmt.Errorf("%w: max in-flight batches %d must be at least 1", ErrInvalidArgument, c.maxInFlight)
	}
	if c.sendTimeout < 0 {
		return fmt.Errorf("%w: negative send timeout %v", ErrInvalidArgument, c.sendTimeout)
	}
	if c.clock == nil {
		return fmt.Errorf("%w: nil clock", ErrInvalidArgument)
	}
	return c.retry.Validate()
}

// Option configures a Client at Dial.
type Option func(*config)

// WithBatching turns automatic batching of concurrent calls on (the default)
// or off. Off, every call is its own unary RPC.
func WithBatching(on bool) Option { return func(c *config) { c.batching = on } }

// WithStreaming chooses how automatic batching takes calls to a node: on
// one long-lived Stream RPC per node (the default), each call answered as
// soon as its shard has applied it; or off, as unary Batch RPCs, at most
// WithMaxInFlight at once per node, each answered when every shard in it
// has applied its part. Off is for proxies that do not carry bidirectional
// streams. A node older than Stream gets Batch RPCs either way.
func WithStreaming(on bool) Option { return func(c *config) { c.streaming = on } }

// WithoutRouting makes the client send every operation to the first address
// given to Dial, which forwards what it does not lead to the shard's leader,
// instead of routing by the cluster map: one connection, one more hop per
// operation on a cluster. For thin tools.
func WithoutRouting() Option { return func(c *config) { c.routing = false } }

// WithMaxBatchSize caps the operations of one automatic Batch RPC, 1..1000
// (default 1000). Explicit Batch calls are split at this size too.
func WithMaxBatchSize(n int) Option {
	return func(c *config) { c.maxBatch = n }
}

// WithMaxInFlight caps the automatic Batch RPCs in flight at once to each
// grid node (default 8) with WithStreaming(false). Calls made while a
// node's window is full queue up and leave together in its next batch. A
// stream has no window.
func WithMaxInFlight(n int) Option {
	return func(c *config) { c.maxInFlight = n }
}

// WithRetryPolicy sets how calls that found the grid unavailable are retried
// (default DefaultRetryPolicy()).
func WithRetryPolicy(p RetryPolicy) Option { return func(c *config) { c.retry = p } }

// WithSendTimeout bounds each send of an operation (or of a Batch RPC) to a
// node of a cluster (default DefaultSendTimeout; 0 turns it off). A send
// without an answer by then fails as unavailable, may have been applied,
// and the node is avoided for a while and the map refreshed, so that the
// retry goes to another replica of the shard, which answers or redirects to
// the new leader: a frozen or cut-off leader does not pin calls for the
// length of its fault. Keep it well above the time a loaded leader takes to
// answer a full batch. A standalone node, or a client built WithoutRouting,
// has nowhere else to send, and its sends are bounded by the call's context
// only.
func WithSendTimeout(d time.Duration) Option { return func(c *config) { c.sendTimeout = d } }

// WithDialOptions passes options to grpc.NewClient, after the client's own
// (plaintext transport, a receive limit that fits a full batch of results,
// reconnect backoff capped at 2 s), so they can override them: transport
// credentials, keepalive, interceptors.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOpts = append(c.dialOpts, opts...) }
}

// WithClock sets the clock the client measures local safe deadlines with
// (Result.SafeUntil, Process; default time.Now). For tests that skew time.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// Options of operations. Each constructor says which operations take it; an
// option of Reserve is also an option of Process.

// ProcessOption configures one Process call.
type ProcessOption interface {
	applyProcess(*processConfig)
}

// ReserveOption configures a Reserve. Every ReserveOption is also a
// ProcessOption, applied to the Reserve that Process makes.
type ReserveOption interface {
	ProcessOption
	applyReserve(*gridpb.ReserveRequest)
}

// CompleteOption configures a Complete.
type CompleteOption interface {
	applyComplete(*gridpb.CompleteRequest)
}

// FailOption configures a Fail.
type FailOption interface {
	applyFail(*gridpb.FailRequest)
}

// GetOption configures a Get.
type GetOption interface {
	applyGet(*gridpb.GetRequest)
}

// ReleaseOption configures a Release.
type ReleaseOption interface {
	applyRelease(*gridpb.ReleaseRequest)
}

// ExtendOption configures an Extend.
type ExtendOption interface {
	applyExtend(*gridpb.ExtendRequest)
}

// ForgetOption configures a Forget.
type ForgetOption interface {
	applyForget(*gridpb.ForgetRequest)
}

type leaseOption time.Duration

func (o leaseOption) applyReserve(r *gridpb.ReserveRequest) { r.LeaseMs = millis(time.Duration(o)) }
func (o leaseOption) applyProcess(p *processConfig)         { p.lease = time.Duration(o) }

// WithLease sets the processing lease, 100 ms .. 1 h (default 30 s). Reserve,
// Process.
func WithLease(d time.Duration) ReserveOption { return leaseOption(d) }

type maxAttemptsOption int

func (o maxAttemptsOption) applyReserve(r *gridpb.ReserveRequest) { r.MaxAttempts = uint32(max(o, 0)) }
func (o maxAttemptsOption) applyProcess(p *processConfig)         { p.maxAttempts = int(o) }

// WithMaxAttempts sets the attempts after which a failing key is poisoned
// (default 5). Reserve, Process.
func WithMaxAttempts(n int) ReserveOption { return maxAttemptsOption(n) }

type fingerprintOption uint64

func (o fingerprintOption) applyReserve(r *gridpb.ReserveRequest) {
	fp := uint64(o)
	r.Fingerprint = &fp
}
func (o fingerprintOption) applyProcess(p *processConfig) { p.reserve = append(p.reserve, o) }

// WithFingerprint sets a 64-bit hash of the message payload: the same key
// reserved with a different fingerprint is MISMATCH. Reserve, Process.
func WithFingerprint(fp uint64) ReserveOption { return fingerprintOption(fp) }

type entityOption struct {
	entity  string
	version uint64
}

func (o entityOption) applyReserve(r *gridpb.ReserveRequest) {
	r.Entity, r.Version = []byte(o.entity), o.version
}
func (o entityOption) applyProcess(p *processConfig) {
	p.reserve = append(p.reserve, o)
	p.entity = ForEntity(o.entity)
}

// WithEntity names the entity the message changes and its version: a
// version not newer than the entity's last completed one is STALE. The key
// then lives on the entity's shard, so Get and Forget of it must name the
// entity with ForEntity; settles find it by their token. Process names it.
// Reserve, Process.
func WithEntity(entity string, version uint64) ReserveOption {
	return entityOption{entity: entity, version: version}
}

type poisonRetentionOption time.Duration

func (o poisonRetentionOption) applyReserve(r *gridpb.ReserveRequest) {
	r.PoisonRetentionMs = millis(time.Duration(o))
}
func (o poisonRetentionOption) applyProcess(p *processConfig) {
	p.poisonRetention = time.Duration(o)
}

// WithPoisonRetention sets how long a key poisoned by a takeover (Reserve) or
// by Process's Fail answers POISONED (default: the grid's). Reserve, Process.
func WithPoisonRetention(d time.Duration) ReserveOption { return poisonRetentionOption(d) }

// RetentionOption is the option made by WithRetention.
type RetentionOption time.Duration

func (o RetentionOption) applyComplete(r *gridpb.CompleteRequest) {
	r.RetentionMs = millis(time.Duration(o))
}
func (o RetentionOption) applyFail(r *gridpb.FailRequest) { r.RetentionMs = millis(time.Duration(o)) }
func (o RetentionOption) applyProcess(p *processConfig)   { p.retention = time.Duration(o) }

// WithRetention sets how long a settled key is kept, up to 400 days: the
// COMPLETED record for Complete and Process (default 7 days), the POISONED
// record for Fail (default: the grid's).
func WithRetention(d time.Duration) RetentionOption { return RetentionOption(d) }

type resultOption []byte

func (o resultOption) applyComplete(r *gridpb.CompleteRequest) { r.Result = o }

// WithResult stores a result (<= 64 KiB) handed back to duplicates. Complete.
// The slice must not change until the call returns.
func WithResult(b []byte) CompleteOption { return resultOption(b) }

type retryAfterOption time.Duration

func (o retryAfterOption) applyFail(r *gridpb.FailRequest) {
	ms := millis(time.Duration(o))
	r.RetryAfterMs = &ms
}

// WithRetryAfter sets the delay before the key may be reserved again,
// instead of the grid's exponential backoff by attempt. Fail.
func WithRetryAfter(d time.Duration) FailOption { return retryAfterOption(d) }

type poisonOption struct{}

func (poisonOption) applyFail(r *gridpb.FailRequest) { r.Poison = true }

// WithPoison poisons the key now instead of allowing a retry. Fail.
func WithPoison() FailOption { return poisonOption{} }

type staleOKOption struct{}

func (staleOKOption) applyGet(r *gridpb.GetRequest) { r.StaleOk = true }

// WithStaleOK allows a possibly stale read from the local replica instead
// of a linearizable one. Get.
func WithStaleOK() GetOption { return staleOKOption{} }

type showTokenOption struct{}

func (showTokenOption) applyGet(r *gridpb.GetRequest) { r.ShowToken = true }

// WithShowToken asks for the operator view: the Result carries the record's
// token, which a Get otherwise never shows (a reader is not the holder, and
// the token of a lease would let it settle another consumer's work). Get.
func WithShowToken() GetOption { return showTokenOption{} }

// The option types keep up with the operations they claim to configure.
var (
	_ ReserveOption  = leaseOption(0)
	_ CompleteOption = RetentionOption(0)
	_ FailOption     = RetentionOption(0)
	_ ProcessOption  = RetentionOption(0)
	_ CompleteOption = EntityOption("")
	_ FailOption     = EntityOption("")
	_ ReleaseOption  = EntityOption("")
	_ ExtendOption   = EntityOption("")
	_ GetOption      = EntityOption("")
	_ ForgetOption   = EntityOption("")
)

// EntityOption is the option made by ForEntity.
type EntityOption string

// ForEntity names the entity a key was reserved with (WithEntity). Such a key
// lives on the entity's shard, so Get and Forget of it must name the same
// entity. Complete, Fail, Release and Extend find the key by their token
// and need not (the token decides over the entity they name). Complete,
// Fail, Release, Extend, Get, Forget.
func ForEntity(entity string) EntityOption { return EntityOption(entity) }

func (o EntityOption) applyComplete(r *gridpb.CompleteRequest) { r.Entity = o.bytes() }
func (o EntityOption) applyFail(r *gridpb.FailRequest)         { r.Entity = o.bytes() }
func (o EntityOption) applyRelease(r *gridpb.ReleaseRequest)   { r.Entity = o.bytes() }
func (o EntityOption) applyExtend(r *gridpb.ExtendRequest)     { r.Entity = o.bytes() }
func (o EntityOption) applyGet(r *gridpb.GetRequest)           { r.Entity = o.bytes() }
func (o EntityOption) applyForget(r *gridpb.ForgetRequest)     { r.Entity = o.bytes() }

func (o EntityOption) bytes() []byte {
	if o == "" {
		return nil
	}
	return []byte(o)
}

// WithTLS makes the client dial the grid over TLS with conf: its RootCAs
// verify the nodes' certificates, and its Certificates (or
// GetClientCertificate) give the client's own for a grid that asks for one
// (--client-cert-auth). Without it the client dials in plaintext.
func WithTLS(conf *tls.Config) Option {
	return func(c *config) {
		c.dialOpts = append(c.dialOpts, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	}
}

// WithToken sends token as a bearer token (the authorization metadata)
// with every call, for a grid with auth on. Send it over TLS (WithTLS):
// whoever reads it can use it.
func WithToken(token string) Option {
	return func(c *config) { c.dialOpts = append(c.dialOpts, grpc.WithPerRPCCredentials(bearer(token))) }
}

// bearer is a token as gRPC per-call credentials.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false so that a grid in plaintext (a test, a
// private network) can still check tokens; WithToken's doc says to use TLS.
func (bearer) RequireTransportSecurity() bool { return false }
