package target

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/l4xg/grid/bench/internal/workload"
)

// MaxEtcdTxnOps is the most nested put-if-absent transactions one etcd
// transaction takes under the default --max-txn-ops of 128 (etcd 3.4 refuses
// 128 of them, measured).
const MaxEtcdTxnOps = 127

// Etcd drives etcd the way teams use it as a lock/idempotency service: a
// lease per reservation and a put-if-absent transaction,
//
//	Grant(ttl) ; Txn(If CreateRevision(key) == 0, Then Put(key, held, WithLease))
//
// and, to complete, a new lease of the retention and
//
//	Txn(If CreateRevision(key) == token, Then Put(key, completed, WithLease))
//
// where token is the revision that created the key: a fence against a key
// that expired and was reserved again. A refused reserve leaves its lease to
// expire (revoking it would be one more Raft write per duplicate).
type Etcd struct {
	cli       *clientv3.Client
	endpoints []string
}

var _ workload.Target = (*Etcd)(nil)

// NewEtcd connects to the endpoints and checks the first one answers.
func NewEtcd(ctx context.Context, endpoints []string) (*Etcd, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", endpoints, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Status(sctx, endpoints[0]); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %v: %w", endpoints, err)
	}
	return &Etcd{cli: cli, endpoints: endpoints}, nil
}

// Name implements workload.Target.
func (e *Etcd) Name() string { return "etcd" }

// Close closes the client.
func (e *Etcd) Close() error { return e.cli.Close() }

// ttl is a lease duration in etcd's whole seconds, rounded up.
func ttl(d time.Duration) int64 { return max(1, int64((d+time.Second-1)/time.Second)) }

// Reserve grants a lease and puts the key if it was never created.
func (e *Etcd) Reserve(ctx context.Context, key string, lease time.Duration) (workload.Reservation, error) {
	l, err := e.cli.Grant(ctx, ttl(lease))
	if err != nil {
		return workload.Reservation{}, err
	}
	resp, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "held", clientv3.WithLease(l.ID))).
		Commit()
	if err != nil {
		return workload.Reservation{}, err
	}
	if !resp.Succeeded {
		return workload.Reservation{Key: key}, nil
	}
	return workload.Reservation{Key: key, Acquired: true, Token: uint64(resp.Header.Revision)}, nil
}

// Complete grants a lease of the retention and rewrites the key as completed
// under it, if it is still the key this reservation created.
func (e *Etcd) Complete(ctx context.Context, r workload.Reservation, retention time.Duration) error {
	l, err := e.cli.Grant(ctx, ttl(retention))
	if err != nil {
		return err
	}
	resp, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(r.Key), "=", int64(r.Token))).
		Then(clientv3.OpPut(r.Key, "completed", clientv3.WithLease(l.ID))).
		Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %s", ErrLeaseLost, r.Key)
	}
	return nil
}

// ReserveBatch grants one lease for the batch and sends one transaction of
// nested put-if-absent transactions, one per key, so each key gets its own
// answer in a single Raft entry. Batches over MaxEtcdTxnOps keys are split
// into transactions sent in parallel.
func (e *Etcd) ReserveBatch(ctx context.Context, keys []string, lease time.Duration) ([]workload.Reservation, error) {
	l, err := e.cli.Grant(ctx, ttl(lease))
	if err != nil {
		return nil, err
	}
	out := make([]workload.Reservation, len(keys))
	var g errgroup.Group
	for start := 0; start < len(keys); start += MaxEtcdTxnOps {
		end := min(start+MaxEtcdTxnOps, len(keys))
		g.Go(func() error { return e.batchTxn(ctx, keys[start:end], l.ID, out[start:end]) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

func (e *Etcd) batchTxn(ctx context.Context, keys []string, lease clientv3.LeaseID, out []workload.Reservation) error {
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(k, "held", clientv3.WithLease(lease))},
			nil)
	}
	resp, err := e.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if len(resp.Responses) != len(keys) {
		return fmt.Errorf("etcd: %d answers for %d keys", len(resp.Responses), len(keys))
	}
	for i, r := range resp.Responses {
		t := r.GetResponseTxn()
		if t == nil {
			return errors.New("etcd: nested transaction without its answer")
		}
		out[i] = workload.Reservation{Key: keys[i], Acquired: t.Succeeded, Token: uint64(resp.Header.Revision)}
	}
	return nil
}

// Memory is the backend database size from Status (DbSize, the bbolt file);
// DbSizeInUse is an extra.
func (e *Etcd) Memory(ctx context.Context) (workload.Memory, error) {
	st, err := e.cli.Status(ctx, e.endpoints[0])
	if err != nil {
		return workload.Memory{}, err
	}
	return workload.Memory{Bytes: st.DbSize, Source: "Status db_size",
		Extra: map[string]int64{"db_size_in_use": st.DbSizeInUse}}, nil
}

// Cleanup deletes every key starting with prefix.
func (e *Etcd) Cleanup(ctx context.Context, prefix string) (int64, error) {
	if prefix == "" {
		return 0, errors.New("etcd: cleanup needs a non-empty prefix")
	}
	resp, err := e.cli.Delete(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	return resp.Deleted, nil
}
