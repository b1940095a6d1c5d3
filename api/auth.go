package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
)

// Role is what a token may do. Each role may do what the ones below it may.
type Role int

// The roles, weakest first.
const (
	RoleConsumer Role = iota + 1 // reserve, settle, get
	RoleOperator                 // and forget, audit, get by digest
	RoleAdmin                    // and drain and cluster admin
)

func (r Role) String() string {
	switch r {
	case RoleConsumer:
		return "consumer"
	case RoleOperator:
		return "operator"
	case RoleAdmin:
		return "admin"
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// MetadataAuthorization carries "Bearer <token>" on every call.
const MetadataAuthorization = "authorization"

// Token is one entry of the tokens file: the SHA-256 of a bearer token
// (never the token), its role and the namespaces it may touch: exact
// names, or prefixes ending in "*" ("payments-*"; "*" is every namespace;
// an admin token without namespaces may touch every one).
type Token struct {
	Name       string   `json:"name" yaml:"name"`
	SHA256     string   `json:"sha256" yaml:"sha256"`
	Role       string   `json:"role" yaml:"role"`
	Namespaces []string `json:"namespaces" yaml:"namespaces"`
}

type tokenEntry struct {
	name       string
	hash       [sha256.Size]byte
	role       Role
	namespaces []string
}

// Authorizer checks every Grid call's bearer token against the tokens: a
// call without a known token answers Unauthenticated, one outside its
// token's namespaces or role PermissionDenied, naming the namespace or the
// verb. Everything is denied by default. Health and reflection are other
// services and stay open. Forwarded calls carry their caller's token, so a
// node checks them again.
type Authorizer struct {
	tokens []tokenEntry
	audit  *AuditLog // nil: none
}

// NewAuthorizer checks tokens and returns their authorizer; audit, if not
// nil, receives the refusals and the operator and admin calls.
func NewAuthorizer(tokens []Token, audit *AuditLog) (*Authorizer, error) {
	if len(tokens) == 0 {
		return nil, errors.New("api: auth on with no token: nothing could be called")
	}
	a := &Authorizer{audit: audit}
	for i, t := range tokens {
		e := tokenEntry{name: t.Name, namespaces: t.Namespaces}
		h, err := hex.DecodeString(t.SHA256)
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("api: token %d (%q): sha256 must be 64 hex digits, the SHA-256 of the token (never the token itself)", i, t.Name)
		}
		copy(e.hash[:], h)
		switch t.Role {
		case "consumer":
			e.role = RoleConsumer
		case "operator":
			e.role = RoleOperator
		case "admin":
			e.role = RoleAdmin
		default:
			return nil, fmt.Errorf("api: token %d (%q): role %q: consumer, operator or admin", i, t.Name, t.Role)
		}
		if len(t.Namespaces) == 0 && e.role != RoleAdmin {
			return nil, fmt.Errorf("api: token %d (%q): no namespace", i, t.Name)
		}
		a.tokens = append(a.tokens, e)
	}
	return a, nil
}

// HashToken is the SHA-256 a tokens file holds for token, in hex.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// identify finds the caller's token. The token presented is hashed and
// the hash compared with every entry in constant time, whichever matches:
// the raw token is never compared, and a wrong one takes as long as a
// right one.
func (a *Authorizer) identify(ctx context.Context) (*tokenEntry, error) {
	vals := metadata.ValueFromIncomingContext(ctx, MetadataAuthorization)
	if len(vals) == 0 {
		return nil, status.Error(codes.Unauthenticated, "no bearer token (authorization metadata)")
	}
	return a.identifyBearer(vals[0])
}

// HTTPRole checks an HTTP request's "Authorization: Bearer" header: the
// token must be known and have at least role need.
func (a *Authorizer) HTTPRole(header string, need Role) error {
	t, err := a.identifyBearer(header)
	if err != nil {
		a.audit.record(auditEvent{Event: "unauthenticated", Method: "http", Error: status.Convert(err).Message()})
		return err
	}
	if t.role < need {
		err := fmt.Errorf("token %q (%s) needs the %s role", t.name, t.role, need)
		a.audit.record(auditEvent{Event: "denied", Token: t.name, Method: "http", Error: err.Error()})
		return err
	}
	return nil
}

func (a *Authorizer) identifyBearer(header string) (*tokenEntry, error) {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return nil, status.Error(codes.Unauthenticated, `authorization metadata is not "Bearer <token>"`)
	}
	h := sha256.Sum256([]byte(tok))
	var found *tokenEntry
	for i := range a.tokens {
		if subtle.ConstantTimeCompare(h[:], a.tokens[i].hash[:]) == 1 {
			found = &a.tokens[i]
		}
	}
	if found == nil {
		return nil, status.Error(codes.Unauthenticated, "unknown bearer token")
	}
	return found, nil
}

// allows reports whether t may touch namespace ns.
func (t *tokenEntry) allows(ns string) bool {
	if t.role == RoleAdmin && len(t.namespaces) == 0 {
		return true
	}
	for _, p := range t.namespaces {
		if p == ns || (strings.HasSuffix(p, "*") && strings.HasPrefix(ns, strings.TrimSuffix(p, "*"))) {
			return true
		}
	}
	return false
}

// access is one thing a request asks to do: verb on namespace ns (""
// for calls without one), needing role.
type access struct {
	verb string
	role Role
	ns   string
}

// check reports whether t may make access a.
func (t *tokenEntry) check(a access) error {
	if t.role < a.role {
		return status.Errorf(codes.PermissionDenied, "token %q (%s) may not %s: it needs the %s role", t.name, t.role, a.verb, a.role)
	}
	if a.ns != "" && !t.allows(a.ns) {
		return status.Errorf(codes.PermissionDenied, "token %q may not %s in namespace %q", t.name, a.verb, a.ns)
	}
	return nil
}

// opAccess is the access of an operation's request, a unary call's or
// one of a Batch or a stream frame: a consumer's in its namespace, but for
// Forget and a Get by digest (an operator's); an empty operation asks for
// an admin's.
func opAccess(req gridpb.KeyedRequest) access {
	verb := "forget"
	switch r := req.(type) {
	case nil:
		return access{"call", RoleAdmin, ""}
	case *gridpb.ForgetRequest:
		return access{verb, RoleOperator, string(r.GetNamespace())}
	case *gridpb.GetRequest:
		if len(r.GetDigest()) > 0 {
			return access{"get by digest", RoleOperator, ""}
		}
		verb = "get"
	case *gridpb.ReserveRequest:
		verb = "reserve"
	case *gridpb.CompleteRequest:
		verb = "complete"
	case *gridpb.FailRequest:
		verb = "fail"
	case *gridpb.ReleaseRequest:
		verb = "release"
	case *gridpb.ExtendRequest:
		verb = "extend"
	}
	return access{verb, RoleConsumer, string(req.GetNamespace())}
}

// accesses lists the accesses a request of method asks for: one per
// operation of a Batch or a stream frame, one for any other request.
func accesses(method string, req any) []access {
	one := func(verb string, role Role, ns string) []access { return []access{{verb, role, ns}} }
	var ops []*gridpb.Op
	switch r := req.(type) {
	case gridpb.KeyedRequest:
		return []access{opAccess(r)}
	case *gridpb.BatchRequest:
		ops = r.GetOps()
	case *gridpb.StreamRequest:
		ops = r.GetOps()
	case *gridpb.AuditRequest:
		return one("audit", RoleOperator, string(r.GetNamespace()))
	case *gridpb.StatusRequest, *gridpb.ClusterMapRequest:
		return one("read the cluster's status", RoleConsumer, "")
	case *gridpb.DrainRequest:
		return one("drain", RoleAdmin, "")
	case *gridpb.ShardAdminRequest:
		return one("administer shards", RoleAdmin, "")
	case *gridpb.GossipKeysRequest:
		return one("change the gossip keyring", RoleAdmin, "")
	default:
		return one("call "+method, RoleAdmin, "")
	}
	out := make([]access, len(ops))
	for i, op := range ops {
		out[i] = opAccess(op.Request())
	}
	return out
}

// audited: the calls the audit log records when allowed.
func audited(req any) (string, bool) {
	switch req.(type) {
	case *gridpb.ForgetRequest:
		return "forget", true
	case *gridpb.DrainRequest:
		return "drain", true
	case *gridpb.ShardAdminRequest:
		return "shard_admin", true
	case *gridpb.AuditRequest:
		return "audit", true
	case *gridpb.GossipKeysRequest:
		return "gossip_keys", true
	}
	return "", false
}

// isGrid reports a method of the Grid service (not health, not reflection).
func isGrid(method string) bool {
	return strings.HasPrefix(method, "/"+gridpb.Grid_ServiceDesc.ServiceName+"/")
}

// authorize checks a request on behalf of the caller of ctx.
func (a *Authorizer) authorize(ctx context.Context, method string, req any) error {
	t, err := a.identify(ctx)
	if err != nil {
		a.audit.record(auditEvent{Event: "unauthenticated", Method: method, Error: status.Convert(err).Message()})
		return err
	}
	return a.admit(t, method, req)
}

// admit checks every access of req for t, the identified caller: the first
// one refused is audited and returned; if none is, the audited calls of req
// are recorded. Unary calls and every frame of a stream come here.
func (a *Authorizer) admit(t *tokenEntry, method string, req any) error {
	for _, acc := range accesses(method, req) {
		if err := t.check(acc); err != nil {
			a.audit.record(auditEvent{Event: "denied", Token: t.name, Method: method, Namespace: acc.ns, Error: status.Convert(err).Message()})
			return err
		}
	}
	a.recordAllowed(t, method, req)
	return nil
}

// recordAllowed records the audited calls of req: itself, or the Forgets a
// batch or a stream frame carries.
func (a *Authorizer) recordAllowed(t *tokenEntry, method string, req any) {
	if ev, ok := audited(req); ok {
		a.audit.record(auditEvent{Event: ev, Token: t.name, Method: method, Namespace: namespaceOf(req), Digest: digestOf(req)})
		return
	}
	var ops []*gridpb.Op
	switch r := req.(type) {
	case *gridpb.BatchRequest:
		ops = r.GetOps()
	case *gridpb.StreamRequest:
		ops = r.GetOps()
	}
	for _, op := range ops {
		if f := op.GetForget(); f != nil {
			a.audit.record(auditEvent{Event: "forget", Token: t.name, Method: method, Namespace: namespaceOf(f), Digest: digestOf(f)})
		}
	}
}

func namespaceOf(req any) string {
	if r, ok := req.(interface{ GetNamespace() []byte }); ok {
		return string(r.GetNamespace())
	}
	return ""
}

// digestOf is the key's digest of a keyed request, in hex: the audit log
// never holds a key.
func digestOf(req any) string {
	r, ok := req.(interface {
		GetNamespace() []byte
		GetKey() []byte
	})
	if !ok || len(r.GetKey()) == 0 {
		return ""
	}
	return digest.Key(string(r.GetNamespace()), r.GetKey()).String()
}

// Unary is the authorization interceptor of unary calls.
func (a *Authorizer) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if isGrid(info.FullMethod) {
		if err := a.authorize(ctx, info.FullMethod, req); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

// Stream is the authorization interceptor of streams: the caller is
// identified once, and every request of an operations stream is checked
// as it arrives (a refused one ends the stream with the refusal).
func (a *Authorizer) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !isGrid(info.FullMethod) {
		return handler(srv, ss)
	}
	t, err := a.identify(ss.Context())
	if err != nil {
		a.audit.record(auditEvent{Event: "unauthenticated", Method: info.FullMethod, Error: status.Convert(err).Message()})
		return err
	}
	return handler(srv, &authStream{ServerStream: ss, a: a, t: t, method: info.FullMethod})
}

type authStream struct {
	grpc.ServerStream
	a      *Authorizer
	t      *tokenEntry
	method string
}

func (s *authStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.a.admit(s.t, s.method, m)
}

// forwardAuth copies the caller's bearer token onto a call this node
// forwards, so that the node it reaches checks the caller, not this node.
func forwardAuth(in, out context.Context) context.Context {
	if vals := metadata.ValueFromIncomingContext(in, MetadataAuthorization); len(vals) > 0 {
		return metadata.AppendToOutgoingContext(out, MetadataAuthorization, vals[0])
	}
	return out
}

// AuditLog writes one JSON object a line for every refused call and every
// forget, drain, shard admin and audit call: never a key, only its
// digest. Safe for concurrent use.
type AuditLog struct {
	mu  sync.Mutex
	w   io.Writer
	now func() time.Time
}

// NewAuditLog writes to w.
func NewAuditLog(w io.Writer) *AuditLog { return &AuditLog{w: w, now: time.Now} }

type auditEvent struct {
	Time      string `json:"time"`
	Event     string `json:"event"`
	Token     string `json:"token,omitempty"`
	Method    string `json:"method"`
	Namespace string `json:"namespace,omitempty"`
	Digest    string `json:"digest,omitempty"`
	Error     string `json:"error,omitempty"`
}

func (l *AuditLog) record(e auditEvent) {
	if l == nil {
		return
	}
	e.Time = l.now().UTC().Format(time.RFC3339Nano)
	b, _ := json.Marshal(e)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(b, '\n'))
}
