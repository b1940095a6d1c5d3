package gridpb

import (
	"strings"
	"testing"

	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// TestCodecMatchesProto fills every field of every message of grid.proto
// (each oneof choice in turn, repeated fields with two elements, nested
// messages two levels deep) and checks that Codec and the proto package
// read each other's bytes back to an equal message, and that the sizes
// agree.
func TestCodecMatchesProto(t *testing.T) {
	msgs := File_grid_proto.Messages()
	if msgs.Len() < 30 {
		t.Fatalf("grid.proto has %d messages, fewer than expected: the descriptor walk is wrong", msgs.Len())
	}
	cases := 0
	for i := range msgs.Len() {
		md := msgs.Get(i)
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range filled(mt, 2) {
			cases++
			t.Run(string(md.Name()), func(t *testing.T) { roundTrip(t, m) })
		}
	}
	t.Logf("%d filled messages of %d types", cases, msgs.Len())
}

func roundTrip(t *testing.T, m proto.Message) {
	t.Helper()
	c := Codec{}
	vm, ok := m.(vtMessage)
	if !ok {
		t.Fatalf("%T has no generated marshalling: run go generate in api/gridpb", m)
	}
	if got, want := vm.SizeVT(), proto.Size(m); got != want {
		t.Errorf("SizeVT %d, proto.Size %d", got, want)
	}
	data, err := c.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	back := m.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(data.Materialize(), back); err != nil {
		t.Fatalf("proto reads the codec's bytes: %v", err)
	}
	if !proto.Equal(m, back) {
		t.Errorf("codec -> proto: %v, want %v", back, m)
	}
	pdata, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	// Decoded into a message that holds other values: they must go, as
	// with proto.Unmarshal.
	into := filled(m.ProtoReflect().Type(), 1)[0]
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(pdata)}, into); err != nil {
		t.Fatalf("the codec reads proto's bytes: %v", err)
	}
	if !proto.Equal(m, into) {
		t.Errorf("proto -> codec: %v, want %v", into, m)
	}
}

// filled returns messages of type mt with every field set: one message per
// choice of its first oneof (one message when it has none).
func filled(mt protoreflect.MessageType, depth int) []proto.Message {
	md := mt.Descriptor()
	choices := 1
	if md.Oneofs().Len() > 0 {
		choices = md.Oneofs().Get(0).Fields().Len()
	}
	var out []proto.Message
	for choice := range choices {
		m := mt.New()
		fields := md.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() && o.Index() == 0 && o.Fields().Get(choice) != fd {
				continue
			}
			setField(m, fd, depth)
		}
		out = append(out, m.Interface())
	}
	return out
}

// setField sets fd of m to values that differ from the defaults: two
// elements when it is repeated, the first choice of nested oneofs.
func setField(m protoreflect.Message, fd protoreflect.FieldDescriptor, depth int) {
	if fd.Kind() == protoreflect.MessageKind && depth == 0 {
		return
	}
	switch {
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		mp.Set(scalar(fd.MapKey(), 1).MapKey(), element(m, fd.MapValue(), 2, depth))
	case fd.IsList():
		l := m.Mutable(fd).List()
		for i := range 2 {
			if fd.Kind() == protoreflect.MessageKind {
				l.Append(protoreflect.ValueOfMessage(filled(mtOf(fd), depth-1)[0].ProtoReflect()))
			} else {
				l.Append(scalar(fd, i+1))
			}
		}
	default:
		m.Set(fd, element(m, fd, 3, depth))
	}
}

func element(m protoreflect.Message, fd protoreflect.FieldDescriptor, n, depth int) protoreflect.Value {
	if fd.Kind() == protoreflect.MessageKind {
		return protoreflect.ValueOfMessage(filled(mtOf(fd), depth-1)[0].ProtoReflect())
	}
	return scalar(fd, n)
}

func mtOf(fd protoreflect.FieldDescriptor) protoreflect.MessageType {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(fd.Message().FullName())
	if err != nil {
		panic(err)
	}
	return mt
}

// scalar is a value of fd's kind made from n, with large numbers so that
// varints take several bytes.
func scalar(fd protoreflect.FieldDescriptor, n int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(-1000003 * n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(-1000000000003 * n))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(4000000007 - n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1<<63 + uint64(n))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(n) + 0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(n) + 0.25)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(strings.Repeat("s", 200*n))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(strings.Repeat("b", 200*n)))
	}
	panic("gridpb test: no value for kind " + fd.Kind().String())
}

// TestCodecLargeMessageUsesPool marshals a message past gRPC's pooling
// threshold (a 64 KiB result) and reads it back.
func TestCodecLargeMessageUsesPool(t *testing.T) {
	m := &StreamResponse{Ids: []uint64{7}, Results: []*OpResult{{Result: make([]byte, 64<<10)}}}
	data, err := Codec{}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if mem.IsBelowBufferPoolingThreshold(data.Len()) {
		t.Fatalf("%d bytes: below the pooling threshold, the test does not reach the pooled branch", data.Len())
	}
	back := &StreamResponse{}
	if err := (Codec{}).Unmarshal(data, back); err != nil {
		t.Fatal(err)
	}
	data.Free()
	if !proto.Equal(m, back) {
		t.Fatal("a pooled message did not read back equal")
	}
}

// TestCodecFallsBack sends a message not of grid.proto (gRPC health, which
// the node serves on the same server) through gRPC's own codec.
func TestCodecFallsBack(t *testing.T) {
	m := &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}
	data, err := Codec{}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	back := &grpc_health_v1.HealthCheckResponse{}
	if err := (Codec{}).Unmarshal(data, back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(m, back) {
		t.Fatalf("got %v, want %v", back, m)
	}
}

// TestCodecRefusesTruncated reads a frame cut short: an error naming the
// message, never a partial message taken as whole.
func TestCodecRefusesTruncated(t *testing.T) {
	full, err := proto.Marshal(&StreamRequest{Ids: []uint64{1}, Ops: []*Op{{Op: &Op_Reserve{Reserve: &ReserveRequest{Namespace: []byte("ns"), Key: []byte("key")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	err = Codec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(full[:len(full)-2])}, &StreamRequest{})
	if err == nil || !strings.Contains(err.Error(), "StreamRequest") {
		t.Fatalf("got %v, want an error naming StreamRequest", err)
	}
}
