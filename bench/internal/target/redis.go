package target

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/l4xg/grid/bench/internal/workload"
)

// Redis drives a Redis server the way teams use it as an idempotency
// store: SET key token NX PX lease to reserve, SET key completed XX PX
// retention to complete. A refused SET NX is the duplicate suppressed.
type Redis struct {
	rdb *redis.Client
}

var _ workload.Target = (*Redis)(nil)

// NewRedis connects to addr with a pool of at least poolSize connections
// (one per concurrent caller) and checks it answers.
func NewRedis(ctx context.Context, addr string, poolSize int) (*Redis, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis %s: %w", addr, err)
	}
	return &Redis{rdb: rdb}, nil
}

// Name implements workload.Target.
func (r *Redis) Name() string { return "redis" }

// Close closes the pool.
func (r *Redis) Close() error { return r.rdb.Close() }

// token is a random non-zero value to store as the holder's token.
func token() uint64 { return rand.Uint64() | 1 }

// Reserve is SET key token NX PX lease.
func (r *Redis) Reserve(ctx context.Context, key string, lease time.Duration) (workload.Reservation, error) {
	tok := token()
	ok, err := r.rdb.SetNX(ctx, key, strconv.FormatUint(tok, 16), lease).Result()
	if err != nil || !ok {
		return workload.Reservation{Key: key}, err
	}
	return workload.Reservation{Key: key, Acquired: true, Token: tok}, nil
}

// Complete is SET key completed XX PX retention: it keeps the key (as a
// duplicate marker) for the retention if it still exists. Like most
// hand-made Redis idempotency stores it does not check the token (that
// needs a Lua script: GET, compare, SET).
func (r *Redis) Complete(ctx context.Context, res workload.Reservation, retention time.Duration) error {
	ok, err := r.rdb.SetXX(ctx, res.Key, "completed", retention).Result()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s expired", ErrLeaseLost, res.Key)
	}
	return nil
}

// ReserveBatch is one pipeline of SET NX PX, one per key.
func (r *Redis) ReserveBatch(ctx context.Context, keys []string, lease time.Duration) ([]workload.Reservation, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.BoolCmd, len(keys))
	toks := make([]uint64, len(keys))
	for i, k := range keys {
		toks[i] = token()
		cmds[i] = pipe.SetNX(ctx, k, strconv.FormatUint(toks[i], 16), lease)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]workload.Reservation, len(keys))
	for i, c := range cmds {
		out[i] = workload.Reservation{Key: keys[i], Acquired: c.Val(), Token: toks[i]}
	}
	return out, nil
}

// Memory is used_memory from INFO memory; used_memory_rss is an extra.
func (r *Redis) Memory(ctx context.Context) (workload.Memory, error) {
	info, err := r.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return workload.Memory{}, err
	}
	fields := map[string]int64{}
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			fields[k] = n
		}
	}
	used, ok := fields["used_memory"]
	if !ok {
		return workload.Memory{}, fmt.Errorf("redis: no used_memory in INFO memory")
	}
	return workload.Memory{Bytes: used, Source: "INFO memory used_memory",
		Extra: map[string]int64{"used_memory_rss": fields["used_memory_rss"]}}, nil
}

// Cleanup removes every key starting with prefix (SCAN MATCH + UNLINK) and
// reports how many. Never FLUSHALL: others share the server.
func (r *Redis) Cleanup(ctx context.Context, prefix string) (int, error) {
	if prefix == "" || strings.ContainsAny(prefix, "*?[]\\") {
		return 0, fmt.Errorf("redis: cleanup needs a literal, non-empty prefix, got %q", prefix)
	}
	var cursor uint64
	n := 0
	for {
		keys, next, err := r.rdb.Scan(ctx, cursor, prefix+"*", 5000).Result()
		if err != nil {
			return n, err
		}
		if len(keys) > 0 {
			if err := r.rdb.Unlink(ctx, keys...).Err(); err != nil {
				return n, err
			}
			n += len(keys)
		}
		if cursor = next; cursor == 0 {
			return n, nil
		}
	}
}
