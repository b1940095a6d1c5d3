package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/wiretap"
	"github.com/l4xg/grid/internal/gridtest"
)

// Against a real node the calls go on one stream, answered by id.
func TestIntegrationStream(t *testing.T) {
	n := gridtest.Start(t)
	var frames, unary atomic.Int64 // answer frames of a stream; unary RPCs carrying operations
	c := dialNode(t, n, intercept(func(_ context.Context, method string, req, _ any, err error) error {
		switch {
		case strings.HasSuffix(method, "/Stream"):
			frames.Add(1)
		case len(wiretap.OpsOf(req)) > 0:
			unary.Add(1)
		}
		return err
	}))
	ctx := testCtx(t)
	const callers = 200
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("s-", i)
			r, err := c.Reserve(ctx, "ns", key)
			if err == nil && r.Outcome != client.OutcomeAcquired {
				err = fmt.Errorf("%s: %v", key, r.Outcome)
			}
			if err == nil {
				_, err = c.Complete(ctx, "ns", key, r.Token)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if frames.Load() == 0 || unary.Load() != 0 {
		t.Fatalf("%d stream answer frames and %d operation RPCs: want the calls on the real node's stream, none falling back to Batch", frames.Load(), unary.Load())
	}
	if r, err := c.Reserve(ctx, "ns", "s-0"); !errors.Is(err, client.ErrBusy) && (err != nil || r.Outcome != client.OutcomeDuplicate) {
		t.Fatalf("reserve of a completed key: %+v, %v", r, err)
	}
}

// http2Pings counts the HTTP/2 PING frames that are not acks in one
// direction of a connection, fed its bytes as they pass.
type http2Pings struct {
	mu     sync.Mutex
	skip   int    // bytes still to pass unparsed: the client's preface, a frame's payload
	header []byte // the frame header read so far
	pings  int
}

func (p *http2Pings) feed(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(b) > 0 {
		if p.skip > 0 {
			n := min(p.skip, len(b))
			p.skip -= n
			b = b[n:]
			continue
		}
		n := min(9-len(p.header), len(b))
		p.header = append(p.header, b[:n]...)
		b = b[n:]
		if len(p.header) < 9 {
			continue
		}
		length := int(p.header[0])<<16 | int(p.header[1])<<8 | int(p.header[2])
		if typ, flags := p.header[3], p.header[4]; typ == 0x6 && flags&0x1 == 0 {
			p.pings++
		}
		p.header, p.skip = p.header[:0], length
	}
}

func (p *http2Pings) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pings
}

// pingConn passes what the client writes to sent and what it reads to got.
type pingConn struct {
	net.Conn
	sent, got *http2Pings
}

func (c pingConn) Write(b []byte) (int, error) {
	c.sent.feed(b)
	return c.Conn.Write(b)
}

func (c pingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.got.feed(b[:n])
	return n, err
}

// Client and node set their HTTP/2 flow control windows, which turns off
// gRPC's bandwidth-delay estimation: under load it sent a PING, answered
// by an ack, about once per round trip each way, a write and a read on
// both sides each time, a quarter of the node's socket system calls
// (bench/README.md). Neither side sends a PING under load now.
func TestStreamSendsNoPings(t *testing.T) {
	n := gridtest.Start(t)
	sent := &http2Pings{skip: len(http2.ClientPreface)}
	got := &http2Pings{}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return pingConn{Conn: conn, sent: sent, got: got}, nil
	}
	c := dialNode(t, n, client.WithDialOptions(grpc.WithContextDialer(dial)))
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for w := range 50 {
		wg.Go(func() {
			for i := range 40 {
				if _, err := c.Reserve(ctx, "ns", fmt.Sprintf("ping-%d-%d", w, i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if s, g := sent.count(), got.count(); s != 0 || g != 0 {
		t.Fatalf("the client sent %d PINGs and got %d over 2000 reserves, want none", s, g)
	}
}
