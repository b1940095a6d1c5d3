package node_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/node"
)

// TestHalfSentPrefaceIsClosed: a connection to the gRPC port that sends
// half of the HTTP/2 preface and then nothing is closed by the node after
// node.HandshakeTimeout, as the Raft and HTTP ports close theirs, not after
// gRPC's default of 120 s. The bound checked, twice the timeout, is far
// below that default; the event waited for is the node closing the
// connection.
func TestHalfSentPrefaceIsClosed(t *testing.T) {
	t.Parallel()
	n := gridtest.Start(t)
	conn, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("PRI * HTTP/2.0\r\n")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	bound := 2 * node.HandshakeTimeout
	if err := conn.SetReadDeadline(start.Add(bound)); err != nil {
		t.Fatal(err)
	}
	// The node may send its settings first; it closes the connection when
	// the preface does not come.
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a half-sent preface still holds its connection open after %v", time.Since(start).Round(time.Millisecond))
	}
	t.Logf("closed after %v (%v)", time.Since(start).Round(time.Millisecond), err)
	// The node still serves, on one client connection.
	var dials atomic.Int32
	cc, err := grpc.NewClient("passthrough:///"+n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := gridpb.NewGridClient(cc).Get(gridtest.Context(t), &gridpb.GetRequest{Namespace: []byte("ns"), Key: []byte("alive")}); err != nil {
		t.Fatalf("after a half-sent preface: a normal call fails: %v", err)
	}
	if d := dials.Load(); d != 1 {
		t.Fatalf("after a half-sent preface: the client dialled %d times: an answer tore its connection down", d)
	}
}
