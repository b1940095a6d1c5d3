package node

import (
	"io"

	"github.com/l4xg/grid/api"
)

// AuthConfig turns on bearer-token auth (api.Authorizer): every Grid call
// needs a token of Tokens, default deny.
type AuthConfig struct {
	Tokens []api.Token
	// NodeToken is the token this node presents on the calls it makes on
	// its own behalf to the other nodes (placement moves, shard status):
	// one of Tokens with the admin role. Forwarded calls carry their
	// caller's token instead.
	NodeToken string
	// Audit receives the audit log (JSON lines); nil: none.
	Audit io.Writer
	// MetricsOpen serves /metrics without a token; otherwise it needs one
	// (any role), and pprof an admin's. /healthz and /readyz stay open.
	MetricsOpen bool
}

func (c *AuthConfig) auditLog() *api.AuditLog {
	if c.Audit == nil {
		return nil
	}
	return api.NewAuditLog(c.Audit)
}
