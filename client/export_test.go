package client

import (
	"net"

	"google.golang.org/grpc"

	"github.com/l4xg/grid/api/gridpb"
)

// ServeExampleGrid serves a standalone fake grid (fake_test.go) on
// loopback for the examples, which run in package client_test, outside any
// one test; stop ends it. The client's tests against a real node are in
// client/internal/servertest.
func ServeExampleGrid() (addr string, stop func(), err error) {
	f := newFakeGrid()
	f.standalone = true
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	s := grpc.NewServer()
	gridpb.RegisterGridServer(s, f)
	f.server = s
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	return lis.Addr().String(), func() { s.Stop(); <-done }, nil
}
