package gridpb

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	// The proto codec this one falls back to registers itself here.
	_ "google.golang.org/grpc/encoding/proto"
)

// vtMessage is a message of grid.proto with its generated marshalling
// (grid_vtproto.pb.go): no reflection, no size computed twice.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT(dAtA []byte) (int, error)
	UnmarshalVT(dAtA []byte) error
	Reset()
}

// Codec is gRPC's "proto" codec with the generated marshalling of
// grid.proto's messages; any other message (gRPC health, reflection) goes
// to gRPC's own proto codec. The bytes on the wire are the same protobuf
// either way, so either side may use it or not. The client dials with it
// and the node serves with it (grpc.ForceCodecV2, grpc.ForceServerCodecV2):
// the hot path's Stream and Batch frames then cost a third of the CPU to
// encode and decode (bench/README.md).
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Name is the codec's content subtype: "proto", as gRPC's own.
func (Codec) Name() string { return "proto" }

// Marshal encodes v into one buffer of its exact size, from gRPC's pool
// when it is large enough for pooling to pay, as gRPC's codec does.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback().Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, fmt.Errorf("gridpb: marshal %T: %w", v, err)
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, fmt.Errorf("gridpb: marshal %T: %w", v, err)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal decodes data into v, reset first as proto.Unmarshal does. The
// decoded message copies its bytes fields out of data, whose buffers go
// back to gRPC's pool.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback().Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	m.Reset()
	if err := m.UnmarshalVT(buf.ReadOnlyData()); err != nil {
		return fmt.Errorf("gridpb: unmarshal %T: %w", v, err)
	}
	return nil
}

// fallback is gRPC's own proto codec.
func (Codec) fallback() encoding.CodecV2 { return encoding.GetCodecV2("proto") }
