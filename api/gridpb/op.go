package gridpb

// KeyedRequest is what the request of every operation has: the key it
// names (a Get by digest names none: its namespace and key are empty).
type KeyedRequest interface {
	GetNamespace() []byte
	GetKey() []byte
	GetEntity() []byte
}

// Request is the request op carries, nil for an empty operation. It is the
// one place that knows the kinds of operations an Op can hold: the
// client's router and the server's guards read a request's key, token and
// lease through it instead of switching on the kinds again.
func (x *Op) Request() KeyedRequest {
	switch o := x.GetOp().(type) {
	case *Op_Reserve:
		return o.Reserve
	case *Op_Complete:
		return o.Complete
	case *Op_Fail:
		return o.Fail
	case *Op_Release:
		return o.Release
	case *Op_Extend:
		return o.Extend
	case *Op_Get:
		return o.Get
	case *Op_Forget:
		return o.Forget
	}
	return nil
}

// Token is the token a settling operation (Complete, Fail, Release,
// Extend) carries, 0 for any other.
func (x *Op) Token() uint64 {
	if t, ok := x.Request().(interface{ GetToken() uint64 }); ok {
		return t.GetToken()
	}
	return 0
}

// LeaseMs is the lease a Reserve or an Extend asks for in milliseconds, 0
// when it names none or is another operation.
func (x *Op) LeaseMs() int64 {
	if l, ok := x.Request().(interface{ GetLeaseMs() int64 }); ok {
		return l.GetLeaseMs()
	}
	return 0
}
