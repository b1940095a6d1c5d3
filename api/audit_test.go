package api_test

import (
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
)

// TestAuditAndDigestRefusals: bad audit ranges and namespaces and malformed
// digest reads are InvalidArgument errors that name the problem; a valid
// audit of an empty cold tier ends cleanly with no record.
func TestAuditAndDigestRefusals(t *testing.T) {
	n := gridtest.Start(t)
	c := dial(t, n.Addr())
	audit := func(r *gridpb.AuditRequest) (int, error) {
		stream, err := c.Audit(ctx(t), r)
		if err != nil {
			return 0, err
		}
		got := 0
		for {
			_, err := stream.Recv()
			if err == io.EOF {
				return got, nil
			}
			if err != nil {
				return got, err
			}
			got++
		}
	}
	for _, tc := range []struct {
		req  *gridpb.AuditRequest
		want string
	}{
		{&gridpb.AuditRequest{Namespace: "Not A Namespace"}, "invalid namespace"},
		{&gridpb.AuditRequest{Namespace: "orders", SinceUnixMs: 2000, UntilUnixMs: 1000}, "invalid audit range"},
		{&gridpb.AuditRequest{Namespace: "orders", SinceUnixMs: -1}, "invalid audit range"},
	} {
		_, err := audit(tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Audit(%v) = %v; want InvalidArgument naming %q", tc.req, err, tc.want)
		}
	}
	if got, err := audit(&gridpb.AuditRequest{Namespace: "orders"}); err != nil || got != 0 {
		t.Fatalf("audit of an empty cold tier: %d records, %v", got, err)
	}

	for _, req := range []*gridpb.GetRequest{
		{Digest: []byte("short")},
		{Digest: make([]byte, 16), Namespace: "orders"},
		{Digest: make([]byte, 16), Key: []byte("k")},
	} {
		_, err := c.Get(ctx(t), req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "invalid digest") {
			t.Errorf("Get(%v) = %v; want InvalidArgument naming the digest", req, err)
		}
	}
	res, err := c.Get(ctx(t), &gridpb.GetRequest{Digest: make([]byte, 16)})
	if err != nil || res.GetState() != gridpb.State_ABSENT || res.GetTier() != gridpb.Tier_TIER_UNSPECIFIED {
		t.Fatalf("Get of an unknown digest: %v, %v", res, err)
	}
}
