package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/l4xg/grid/internal/gridproc"
)

// ErrNoEtcd is returned when no etcd binary is on PATH.
var ErrNoEtcd = errors.New("launch: etcd not found on PATH")

// EtcdCluster is a set of throwaway etcd members on loopback ports.
type EtcdCluster struct {
	Endpoints []string
	members   []*gridproc.Proc
	dir       string
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// StartEtcd starts members etcd members (1 or 3) with fsync on (etcd's
// default), waits until every member answers Status, and returns them.
// stderr receives their logs (nil discards); it must take concurrent
// writes (an *os.File does).
func StartEtcd(ctx context.Context, members int, stderr io.Writer) (*EtcdCluster, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, ErrNoEtcd
	}
	dir, err := os.MkdirTemp("", "bench-etcd-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * members)
	if err != nil {
		return nil, err
	}
	c := &EtcdCluster{dir: dir}
	var initial []string
	for i := range members {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[2*i+1]))
	}
	for i := range members {
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		argv := []string{bin,
			"--name", fmt.Sprintf("m%d", i),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new", "--initial-cluster-token", "bench",
			"--quota-backend-bytes", fmt.Sprint(int64(8) << 30),
			"--logger", "zap", "--log-level", "error"}
		m, err := gridproc.Start(gridproc.Options{Argv: argv, Stdout: stderr, Stderr: stderr,
			SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}, // none outlives the benchmark
		})
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("launch: start etcd: %w", err)
		}
		c.members = append(c.members, m)
		c.Endpoints = append(c.Endpoints, client)
	}
	if err := c.waitReady(ctx, time.Minute); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// waitReady polls each member's Status and a write through the cluster.
func (c *EtcdCluster) waitReady(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	for _, ep := range c.Endpoints {
		for {
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, ep)
			scancel()
			if err == nil && st.Leader != 0 {
				break
			}
			for i, m := range c.members {
				select {
				case <-m.Exited():
					return fmt.Errorf("launch: etcd member %d exited before ready", i)
				default:
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("launch: etcd %s not ready: %v", ep, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// Stop terminates the members and removes their data.
func (c *EtcdCluster) Stop() {
	for _, m := range c.members {
		m.Stop(10 * time.Second)
	}
	os.RemoveAll(c.dir)
}
