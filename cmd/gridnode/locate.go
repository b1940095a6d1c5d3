package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/l4xg/grid/client"
)

// locateJSON is the JSON shape of locate's answer.
type locateJSON struct {
	Namespace  string              `json:"namespace"`
	Key        string              `json:"key"`
	Entity     string              `json:"entity,omitempty"`
	Standalone bool                `json:"standalone,omitempty"`
	Digest     string              `json:"digest"`
	Slot       uint32              `json:"slot"`
	Shard      int                 `json:"shard"`
	LeaderID   string              `json:"leader_id"`
	LeaderAddr string              `json:"leader_addr"`
	Replicas   []locateReplicaJSON `json:"replicas"`
	Epoch      uint64              `json:"map_epoch"`
}

type locateReplicaJSON struct {
	ID     string `json:"id"`
	Addr   string `json:"addr"`
	Leader bool   `json:"leader"`
}

func bindLocate(fs *flag.FlagSet) func() (cliCustom, error) {
	ns := fs.String("ns", "", "namespace (required)")
	key := fs.String("key", "", "idempotency key (required)")
	entity := entityFlag(fs)
	return func() (cliCustom, error) {
		switch {
		case *ns == "":
			return nil, errors.New("missing --ns")
		case *key == "":
			return nil, errors.New("missing --key")
		}
		return func(ctx context.Context, c *client.Client, o cliOutput) int {
			return runLocate(ctx, c, o, *ns, *key, *entity)
		}, nil
	}
}

// runLocate asks the node at --addr for the cluster map and prints where
// the key lives: digest, slot, shard, the shard's leader as that node
// knows it, and its replicas.
func runLocate(ctx context.Context, c *client.Client, o cliOutput, ns, key, entity string) int {
	loc, err := c.Locate(ctx, ns, key, client.ForEntity(entity))
	if err != nil {
		return o.fail(fmt.Errorf("locate %s/%s: %w", ns, key, err), cliExitCode(err))
	}
	j := locateJSON{Namespace: ns, Key: key, Entity: entity, Standalone: loc.Standalone, Digest: loc.Digest,
		Slot: loc.Slot, Shard: loc.Shard, LeaderID: loc.Leader.ID, LeaderAddr: loc.Leader.Addr,
		Replicas: []locateReplicaJSON{}, Epoch: loc.Epoch}
	for _, r := range loc.Replicas {
		j.Replicas = append(j.Replicas, locateReplicaJSON{ID: r.ID, Addr: r.Addr, Leader: r == loc.Leader})
	}
	if o.json {
		return o.writeJSON(j)
	}
	name := ns + "/" + key
	if entity != "" {
		name += " (entity " + entity + ")"
	}
	fmt.Fprintf(o.stdout, "key %s  digest %s  slot %d  shard %d  map epoch %d\n", name, j.Digest, j.Slot, j.Shard, j.Epoch)
	if j.Standalone {
		fmt.Fprintf(o.stdout, "standalone node %s holds every shard\n", j.LeaderAddr)
		return exitOK
	}
	fmt.Fprintf(o.stdout, "leader %s at %s\n\n", orDash(j.LeaderID), orDash(j.LeaderAddr))
	tw := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tADDRESS\tROLE")
	for i, r := range j.Replicas {
		role := "follower"
		if r.Leader {
			role = "leader"
		}
		if i == 0 {
			role += " (preferred)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.ID, orDash(r.Addr), role)
	}
	return o.flush(tw)
}
