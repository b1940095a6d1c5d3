// Package gridpb holds the protobuf messages and gRPC stubs of the L4XG Grid
// client protocol. The .pb.go files are generated and committed, so a build
// needs no protoc; regenerate them after editing grid.proto with go generate
// (needs protoc, protoc-gen-go and protoc-gen-go-grpc on PATH).
package gridpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative grid.proto
