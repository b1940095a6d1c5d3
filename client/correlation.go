package client

import "context"

type correlationKey struct{}

// ContextWithCorrelationID returns ctx carrying id, the correlation id of the
// message being processed. The broker adapters (client/rabbitmq, ...) set
// it from the message before they call the handler, so that the handler's
// logs and downstream calls can carry it; CorrelationID reads it.
func ContextWithCorrelationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationKey{}, id)
}

// CorrelationID returns the correlation id ctx carries, or "".
func CorrelationID(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey{}).(string)
	return id
}
