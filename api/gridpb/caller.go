package gridpb

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// MetadataCaller is the metadata key of a call that is not a client's: its
// value names who makes it, CallerNode or CallerTool. A node counts such
// calls apart from its clients' (l4xg_grid_internal_rpc_requests_total),
// so that its client RPC metrics (grpc_server_*, l4xg_grid_rpc_*) count
// client traffic only. It sorts the metrics and grants nothing: a call
// with any other value, or none, is a client's.
const MetadataCaller = "grid-caller"

// The callers of MetadataCaller.
const (
	// CallerNode: a node of the grid calling another, on its own behalf
	// (placement moves, shard status, the control epoch) or forwarding a
	// client's operations or drain, which the client's call to the first
	// node already counts.
	CallerNode = "node"
	// CallerTool: the grid's own tools watching or running it: gridnode's
	// status, audit, locate, drain and gossip-key, the launchers of the
	// benchmarks and tests.
	CallerTool = "tool"
)

// WithCaller returns the dial options that mark every call on a
// connection, unary or streaming, as made by caller (MetadataCaller).
func WithCaller(caller string) []grpc.DialOption {
	mark := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, MetadataCaller, caller)
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoke(mark(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(mark(ctx), desc, cc, method, opts...)
		}),
	}
}

// CallerOf is the caller that the incoming call of ctx names in
// MetadataCaller when it is one of the callers above, "" otherwise (a
// client's call): a metric labelled with it takes no value a caller
// chooses.
func CallerOf(ctx context.Context) string {
	for _, v := range metadata.ValueFromIncomingContext(ctx, MetadataCaller) {
		if v == CallerNode || v == CallerTool {
			return v
		}
	}
	return ""
}
