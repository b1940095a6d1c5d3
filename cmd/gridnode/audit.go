package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/l4xg/grid/client"
)

// bindAudit binds the audit verb: the settled records of a namespace and time
// range, from the cold tier of the node at --addr.
func bindAudit(fs *flag.FlagSet) func() (cliCustom, error) {
	ns := fs.String("ns", "", "namespace (required)")
	since := fs.String("since", "720h", "settled at or after: RFC 3339 time, or a duration before now")
	until := fs.String("until", "", "settled before: RFC 3339 time, or a duration before now (default now)")
	limit := fs.Int("limit", 1000, "at most this many records (0: all)")
	return func() (cliCustom, error) {
		now := time.Now()
		q := client.AuditQuery{Namespace: *ns, Limit: *limit}
		var err error
		switch {
		case *ns == "":
			return nil, errors.New("missing --ns")
		case *limit < 0:
			return nil, fmt.Errorf("--limit must not be negative, got %d", *limit)
		}
		if q.Since, err = parseWhen(*since, now); err != nil {
			return nil, fmt.Errorf("--since: %w", err)
		}
		if *until != "" {
			if q.Until, err = parseWhen(*until, now); err != nil {
				return nil, fmt.Errorf("--until: %w", err)
			}
		}
		return func(ctx context.Context, c *client.Client, o cliOutput) int { return runAudit(ctx, c, o, q) }, nil
	}
}

// parseWhen reads an RFC 3339 time or a duration before now ("72h").
func parseWhen(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("duration %v is negative", d)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", s)
	}
	return t, nil
}

type cliAuditJSON struct {
	Digest        string  `json:"digest"`
	Shard         uint32  `json:"shard"`
	State         string  `json:"state"`
	Token         uint64  `json:"token"`
	Attempts      int     `json:"attempts"`
	CompletedAt   string  `json:"completed_at"`
	RetainedUntil string  `json:"retained_until"`
	Result        *string `json:"result,omitempty"`
	ResultBase64  string  `json:"result_base64,omitempty"`
	Fingerprint   string  `json:"fingerprint,omitempty"`
}

// runAudit prints one table row, or with --json one JSON object per line, per
// record.
func runAudit(ctx context.Context, c *client.Client, o cliOutput, q client.AuditQuery) int {
	tw := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	if !o.json {
		fmt.Fprintln(tw, "DIGEST\tSHARD\tSTATE\tCOMPLETED AT\tRETAINED UNTIL\tATTEMPTS\tRESULT")
	}
	n := 0
	err := c.Audit(ctx, q, func(r client.AuditRecord) error {
		n++
		j := cliAuditJSON{
			Digest: r.Digest.String(), Shard: r.Shard, State: r.State.String(), Token: r.Token, Attempts: r.Attempts,
			CompletedAt: cliTime(r.CompletedAt), RetainedUntil: cliTime(r.RetainedUntil),
		}
		if len(r.Result) > 0 && utf8.Valid(r.Result) {
			s := string(r.Result)
			j.Result = &s
		} else if len(r.Result) > 0 {
			j.ResultBase64 = base64.StdEncoding.EncodeToString(r.Result)
		}
		if r.HasFingerprint {
			j.Fingerprint = fmt.Sprintf("%016x", r.Fingerprint)
		}
		if o.json {
			if o.writeJSON(j) != exitOK {
				return errors.New("cannot write output")
			}
			return nil
		}
		res := "-"
		if j.Result != nil {
			res = strconv.Quote(*j.Result)
		}
		_, err := fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\n", j.Digest, j.Shard, j.State, j.CompletedAt, j.RetainedUntil, j.Attempts, res)
		return err
	})
	if err != nil {
		return o.fail(err, cliExitCode(err))
	}
	if o.json {
		return exitOK
	}
	if code := o.flush(tw); code != exitOK {
		return code
	}
	fmt.Fprintf(o.stderr, "%d records\n", n)
	return exitOK
}
