// Package gridpb holds the protobuf messages and gRPC stubs of the L4XG Grid
// client protocol, and the codec both sides use (Codec). The .pb.go files
// are generated and committed, so a build needs no protoc; regenerate them
// after editing grid.proto with go generate (needs protoc, protoc-gen-go,
// protoc-gen-go-grpc and protoc-gen-go-vtproto on PATH, of the versions the
// files' headers name; the last at the version go.mod requires:
// go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.1-0.20240319094008-0393e58bdf10).
// TestCodecMatchesProto fails when grid_vtproto.pb.go lags grid.proto.
package gridpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative --go-vtproto_out=. --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size grid.proto
