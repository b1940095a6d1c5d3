package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testclock"
	"github.com/l4xg/grid/node"
)

// lockedBuffer is an audit log the test reads while the nodes write.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTokenAuth: a 3-node cluster with auth on denies by default.
//   - no token, or an unknown one: Unauthenticated;
//   - a token of namespace "orders" on "payments": PermissionDenied
//     naming the namespace; a consumer's Forget and Drain:
//     PermissionDenied naming the verb; a batch with one op outside the
//     token's namespaces is refused whole;
//   - a call sent to a node that forwards it to the shard's leader
//     carries its caller's token: the leader's audit log records the
//     operator's Forget under the operator's token, and the consumer's
//     reserves go through every node;
//   - the nodes' own calls (placement, status) use the node token: the
//     cluster forms and settles.
func TestTokenAuth(t *testing.T) {
	const (
		consumerTok = "consumer-secret"
		operatorTok = "operator-secret"
		nodeTok     = "node-secret"
	)
	tokens := []api.Token{
		{Name: "orders-consumer", SHA256: api.HashToken(consumerTok), Role: "consumer", Namespaces: []string{"orders", "orders-*"}},
		{Name: "orders-operator", SHA256: api.HashToken(operatorTok), Role: "operator", Namespaces: []string{"orders"}},
		{Name: "nodes", SHA256: api.HashToken(nodeTok), Role: "admin"},
	}
	audits := make([]*lockedBuffer, 3)
	for i := range audits {
		audits[i] = &lockedBuffer{}
	}
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Replicas: 3, Shards: 4, AuthToken: nodeTok, HTTP: true,
		Auth: func(i int) *node.AuthConfig {
			return &node.AuthConfig{Tokens: tokens, NodeToken: nodeTok, Audit: audits[i]}
		}})
	if err := c.AwaitStable(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dial := func(addr string, opts ...client.Option) *client.Client {
		t.Helper()
		cl, err := client.Dial(ctx, addr, append(opts, client.WithRetryPolicy(client.RetryPolicy{Attempts: 1}))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	code := func(err error) codes.Code {
		for e := err; e != nil; {
			if s, ok := status.FromError(e); ok && s.Code() != codes.Unknown {
				return s.Code()
			}
			u, ok := e.(interface{ Unwrap() error })
			if !ok {
				break
			}
			e = u.Unwrap()
		}
		return codes.Unknown
	}
	addr0 := c.Addrs()[0]
	anon := dial(addr0, client.WithoutRouting())
	wrong := dial(addr0, client.WithoutRouting(), client.WithToken("guess"))
	consumer := dial(addr0, client.WithoutRouting(), client.WithToken(consumerTok))
	for name, cl := range map[string]*client.Client{"no token": anon, "an unknown token": wrong} {
		if _, err := cl.Reserve(ctx, "orders", "k"); code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated", name, err)
		}
	}
	_, err := consumer.Reserve(ctx, "payments", "k")
	if code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"payments"`) {
		t.Errorf("orders token on payments: %v, want PermissionDenied naming the namespace", err)
	}
	if _, err := consumer.Forget(ctx, "orders", "k"); code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "forget") {
		t.Errorf("consumer Forget: %v, want PermissionDenied naming the verb", err)
	}
	if _, err := consumer.Drain(ctx, c.ID(2)); code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "drain") {
		t.Errorf("consumer Drain: %v, want PermissionDenied naming the verb", err)
	}
	_, errs, err := consumer.Batch(ctx, []client.Op{client.ReserveOp("orders", "b1"), client.ReserveOp("payments", "b2")})
	if code(errs[1]) != codes.PermissionDenied || strings.Contains(errs[1].Error(), "outcome unknown") || err != nil && code(err) != codes.PermissionDenied {
		t.Errorf("a batch reaching outside the token's namespaces: %v %v, want its operation refused with PermissionDenied, never an unknown outcome (nothing ran)", err, errs)
	}

	// Through every node, each key forwarded to its shard's leader: the
	// consumer's own token goes with each forwarded call.
	for i, a := range c.Addrs() {
		cl := dial(a, client.WithoutRouting(), client.WithToken(consumerTok))
		for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
			key := k + string(rune('0'+i))
			if _, err := cl.Reserve(ctx, "orders-eu", key); err != nil {
				t.Fatalf("reserve %s through node %d: %v", key, i, err)
			}
		}
	}
	// An operator's Forget, sent to a node that does not lead the key's
	// shard, is checked and recorded by the node it is forwarded to under
	// the operator's name (the first node records it too). Leaderships
	// move now and then; a key whose shard the first node came to lead
	// meanwhile proves nothing, and the next key is tried.
	recordedElsewhere := func(via int, d string) bool {
		for j, a := range audits {
			if j == via {
				continue
			}
			for _, line := range strings.Split(strings.TrimSpace(a.String()), "\n") {
				var e struct{ Event, Token, Namespace, Digest string }
				if json.Unmarshal([]byte(line), &e) == nil && e.Event == "forget" && e.Token == "orders-operator" &&
					e.Namespace == "orders" && e.Digest == d {
					return true
				}
			}
		}
		return false
	}
	forwarded := false
	var key string
	for _, k := range []string{"f1", "f2", "f3", "f4", "f5", "f6"} {
		s := c.ShardOf("orders", k)
		ls := c.Leaders(s)
		if len(ls) != 1 {
			continue
		}
		via := (ls[0] + 1) % 3
		op := dial(c.Addrs()[via], client.WithoutRouting(), client.WithToken(operatorTok))
		if _, err := op.Forget(ctx, "orders", k); err != nil {
			t.Fatalf("operator Forget through node %d: %v", via, err)
		}
		if recordedElsewhere(via, digest.Key("orders", []byte(k)).String()) {
			forwarded, key = true, k
			break
		}
		if now := c.Leaders(s); len(now) == 1 && now[0] != via {
			t.Fatalf("a Forget sent to node %d, forwarded to the leader (node %d), is not in its audit log under the operator's name", via, now[0])
		}
	}
	if !forwarded {
		t.Fatal("no Forget was forwarded: the shards' leaderships kept moving")
	}
	for i, a := range audits {
		if strings.Contains(a.String(), `"`+key+`"`) {
			t.Errorf("node %d's audit log holds a key, not only its digest", i)
		}
	}
	// HTTP: probes open, /metrics only with a token.
	base := "http://" + c.Node(0).HTTPAddr()
	if code, _ := gridtest.HTTPGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with auth on: %d, want open", code)
	}
	if code, _ := gridtest.HTTPGet(t, base+"/metrics"); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+consumerTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics with a token: %d", resp.StatusCode)
	}
	if !strings.Contains(audits[0].String(), `"event":"unauthenticated"`) || !strings.Contains(audits[0].String(), `"event":"denied"`) {
		t.Errorf("node 0's audit log lacks the refusals:\n%s", audits[0].String())
	}
}

// TestTokensFileRefusesRawTokens: a tokens file holds hashes; a raw token
// in it, an unknown role or a consumer without namespaces is refused.
func TestTokensFileRefusesRawTokens(t *testing.T) {
	for _, tc := range []struct {
		tok  api.Token
		want string
	}{
		{api.Token{Name: "raw", SHA256: "consumer-secret", Role: "consumer", Namespaces: []string{"a"}}, "64 hex digits"},
		{api.Token{Name: "role", SHA256: api.HashToken("x"), Role: "root", Namespaces: []string{"a"}}, `role "root"`},
		{api.Token{Name: "nowhere", SHA256: api.HashToken("x"), Role: "consumer"}, "no namespace"},
	} {
		if _, err := api.NewAuthorizer([]api.Token{tc.tok}, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.tok.Name, err, tc.want)
		}
	}
}

// TestRateLimitPerNamespace: with a limit of 20 operations a second per
// namespace and the limiter's clock held still, a tenant's 100 reserves
// one after another get its burst of 20 and the other 80 are refused with
// ResourceExhausted naming its namespace, while another tenant's call at
// the same time goes through.
func TestRateLimitPerNamespace(t *testing.T) {
	clock := testclock.New()
	n := startNode(t, node.Config{RateLimit: 20, Knobs: node.TestingKnobs{RateLimitClock: clock.Now}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, n.Addr(), client.WithRetryPolicy(client.RetryPolicy{Attempts: 1}), client.WithBatching(false))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	refused := 0
	for i := range 100 {
		if _, err := cl.Reserve(ctx, "storm", fmt.Sprintf("k%d", i)); err != nil {
			if !strings.Contains(err.Error(), `namespace "storm" is over its rate limit`) {
				t.Fatalf("a refusal that does not name the namespace and the limit: %v", err)
			}
			refused++
		}
	}
	if refused != 80 {
		t.Fatalf("100 reserves in a namespace limited to 20 a second, its clock still: %d refused, want 80", refused)
	}
	if _, err := cl.Reserve(ctx, "quiet", "k"); err != nil {
		t.Fatalf("another namespace during the storm: %v", err)
	}
}

// TestRateLimitedStreamGoesOn: with the client's defaults (its calls ride
// one stream, framed as they come), operations refused by the rate limit
// fail with ErrLimitExceeded, never as an unknown outcome, and the stream
// serves the namespace again once its bucket refills; a Batch of more
// operations than a second's worth is taken against a full bucket instead
// of being refused for good, and leaves the namespace in debt. The
// limiter's clock moves only when the test moves it.
func TestRateLimitedStreamGoesOn(t *testing.T) {
	clock := testclock.New()
	n := startNode(t, node.Config{RateLimit: 20, Knobs: node.TestingKnobs{RateLimitClock: clock.Now}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Two waves of 100 at once: however the client frames them, the
	// bucket takes at most its burst or one frame larger than it (into
	// debt), so at most 100 of the 200 pass.
	refused := 0
	for wave := range 2 {
		errs := make([]error, 100)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = cl.Reserve(ctx, "storm", fmt.Sprintf("k%d-%d", wave, i))
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err == nil {
				continue
			}
			refused++
			if !errors.Is(err, client.ErrLimitExceeded) || strings.Contains(err.Error(), "outcome unknown") ||
				!strings.Contains(err.Error(), `namespace "storm" is over its rate limit`) {
				t.Fatalf("a rate-limit refusal: %v; want ErrLimitExceeded naming the namespace, not an unknown outcome", err)
			}
		}
	}
	if refused < 100 {
		t.Fatalf("200 reserves in a namespace limited to 20 a second, its clock still: %d refused, want at least 100", refused)
	}
	clock.Add(10 * time.Second) // pays any debt of the storm and refills
	if _, err := cl.Reserve(ctx, "storm", "after"); err != nil {
		t.Fatalf("the storm's namespace once refilled: %v", err)
	}
	ops := make([]client.Op, 50)
	for i := range ops {
		ops[i] = client.ReserveOp("big", fmt.Sprintf("b%d", i))
	}
	if _, _, err := cl.Batch(ctx, ops); err != nil {
		t.Fatalf("a batch of 50 operations against a limit of 20 a second, bucket full: %v", err)
	}
	if _, err := cl.Reserve(ctx, "big", "next"); !errors.Is(err, client.ErrLimitExceeded) {
		t.Fatalf("a reserve right after a batch of 50 against 20 a second: %v, want refused (the namespace is in debt)", err)
	}
}
