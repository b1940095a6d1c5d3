package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridproc"
	"github.com/l4xg/grid/internal/testwait"
)

// TestConfigPrecedence: a flag overrides its environment variable, which
// overrides the config file, which overrides the default; config print
// names each value's source; a key that is no setting, and a value a
// setting refuses, are errors naming them.
func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "grid.yaml")
	writeFile(t, file, "log-level: error\nhot-window: 2h\nshutdown-timeout: 3s\njoin: [10.0.0.1:7422, 10.0.0.2:7422]\n")
	env := map[string]string{"GRID_LOG_LEVEL": "warn", "GRID_SHUTDOWN_TIMEOUT": "4s", "GRID_CONFIG": file}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	f := newServeFlags(&bytes.Buffer{})
	s, err := f.load([]string{"--shutdown-timeout", "5s"}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"shutdown-timeout": {"5s", fromFlag},
		"log-level":        {"warn", "env GRID_LOG_LEVEL"},
		"hot-window":       {"2h0m0s", fromFile},
		"join":             {"10.0.0.1:7422,10.0.0.2:7422", fromFile},
		"listen":           {"127.0.0.1:7420", fromDefault},
		"config":           {file, "env GRID_CONFIG"},
	}
	for k, w := range want {
		if s.values[k] != w[0] || s.sources[k] != w[1] {
			t.Errorf("%s = %q from %q, want %q from %q", k, s.values[k], s.sources[k], w[0], w[1])
		}
	}
	var out bytes.Buffer
	printSettings(&out, s, true)
	var printed map[string]struct{ Value, Source string }
	if err := json.Unmarshal(out.Bytes(), &printed); err != nil || printed["hot-window"].Source != fromFile {
		t.Errorf("config print --json: %v: %s", err, out.String())
	}
	for _, c := range []struct{ yaml, want string }{
		{"shardz: 3\n", `unknown setting "shardz"`},
		{"hot-window: soon\n", "hot-window"},
		{"config: other.yaml\n", `unknown setting "config"`},
	} {
		writeFile(t, file, c.yaml)
		var stdout, stderr bytes.Buffer
		if code := configCmd([]string{"validate", file}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("validate %q: exit %d: %s", c.yaml, code, stderr.String())
		}
	}
	writeFile(t, file, "hot-window: -1s\n")
	var stdout, stderr bytes.Buffer
	if code := configCmd([]string{"validate", file}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "--hot-window") {
		t.Errorf("validate a negative hot window: exit %d: %s", code, stderr.String())
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log writer the test reads while the process writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestClusterFromConfigFileAndEnvironment: three real nodes form a
// cluster, one configured by a file alone, one by GRID_* variables (its
// file named by GRID_CONFIG), one with its client address in its file, its
// environment and its flags (the flag's wins). SIGHUP then reloads a
// shorter hot window on every node (a completed key moves to the cold
// tier), and a reload that changes a setting needing a restart is refused,
// naming it, while the node serves on.
func TestClusterFromConfigFileAndEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	type nodeAddrs struct{ grpc, raft, gossip string }
	var addrs []nodeAddrs
	free := freeAddrs(t, 9)
	for i := range 3 {
		addrs = append(addrs, nodeAddrs{free[3*i], free[3*i+1], free[3*i+2]})
	}
	gossips := []string{addrs[0].gossip, addrs[1].gossip, addrs[2].gossip}
	files := make([]string, 3)
	base := func(i int) string {
		return fmt.Sprintf("hot-window: 24h\nlog-level: info\nreplicas: 3\nshards: 2\nbootstrap-expect: 3\nhttp-listen: \"\"\njoin: [%s]\n",
			strings.Join(gossips, ", "))
	}
	ownSettings := func(i int, listen string) string {
		return fmt.Sprintf("node-id: n%d\ndata-dir: %s\nlisten: %s\nraft-listen: %s\ngossip-listen: %s\n",
			i+1, filepath.Join(dir, fmt.Sprint(i)), listen, addrs[i].raft, addrs[i].gossip)
	}
	var configs [3]string
	configs[0] = base(0) + ownSettings(0, addrs[0].grpc)
	configs[1] = base(1)                                 // the rest from the environment
	configs[2] = base(2) + ownSettings(2, "127.0.0.1:1") // listen: overridden
	env := [3][]string{
		nil,
		{"GRID_NODE_ID=n2", "GRID_DATA_DIR=" + filepath.Join(dir, "1"), "GRID_LISTEN=" + addrs[1].grpc,
			"GRID_RAFT_LISTEN=" + addrs[1].raft, "GRID_GOSSIP_LISTEN=" + addrs[1].gossip},
		{"GRID_LISTEN=127.0.0.1:2"},
	}
	logs := make([]*syncBuffer, 3)
	procs := make([]*gridproc.Proc, 3)
	for i := range 3 {
		files[i] = filepath.Join(dir, fmt.Sprintf("n%d.yaml", i+1))
		writeFile(t, files[i], configs[i])
		args := []string{exe, "serve"}
		e := append(os.Environ(), "GRIDNODE_EXEC=1")
		switch i {
		case 1:
			e = append(e, "GRID_CONFIG="+files[i])
		case 2:
			args = append(args, "--listen", addrs[2].grpc)
			fallthrough
		default:
			args = append(args, "--config", files[i])
		}
		logs[i] = &syncBuffer{}
		p, err := gridproc.Start(gridproc.Options{Argv: args, Env: append(e, env[i]...), Stderr: logs[i]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Kill)
		procs[i] = p
	}
	for i, p := range procs {
		a, err := p.WaitReady(context.Background(), 90*time.Second)
		if err != nil {
			t.Fatalf("node %d: %v\n%s", i+1, err, logs[i])
		}
		if a.GRPC != addrs[i].grpc {
			t.Errorf("node %d serves on %s, want %s (its flag's address)", i+1, a.GRPC, addrs[i].grpc)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, strings.Join([]string{addrs[0].grpc, addrs[1].grpc, addrs[2].grpc}, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// A soft setting: every node's hot window from 24h to 200ms.
	for i := range 3 {
		writeFile(t, files[i], strings.Replace(configs[i], "hot-window: 24h", "hot-window: 200ms", 1))
		if err := procs[i].Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		testwait.For(t, 30*time.Second, fmt.Sprintf("node %d to reload", i+1), func() bool {
			return strings.Contains(logs[i].String(), "config reloaded")
		})
	}
	r, err := c.Reserve(ctx, "cfg", "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, "cfg", "k", r.Token); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 60*time.Second, "the completed key to move to the cold tier", func() bool {
		g, err := c.Get(ctx, "cfg", "k")
		return err == nil && g.Tier == client.TierCold
	})

	// A setting that needs a restart: refused, named, nothing applied.
	writeFile(t, files[0], strings.Replace(configs[0], "shards: 2", "shards: 5", 1))
	if err := procs[0].Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the refusal", func() bool {
		l := logs[0].String()
		return strings.Contains(l, "config reload refused") && strings.Contains(l, `shards (\"2\" -> \"5\")`)
	})
	if _, err := c.Get(ctx, "cfg", "k"); err != nil {
		t.Fatalf("the cluster after a refused reload: %v", err)
	}
}

// TestStrayEnvIsWarned: a GRID_ variable that names no setting is named in
// a warning, with the setting it was probably meant for; serve's settings,
// GRID_CONFIG and the CLI's variables are not.
func TestStrayEnvIsWarned(t *testing.T) {
	f := newServeFlags(&bytes.Buffer{})
	got := strayEnv([]string{"GRID_DATADIR=/x", "GRID_LOG_LEVL=warn", "GRID_SHARDS=3", "GRID_CONFIG=a.yaml",
		"GRID_ADDR=h:1", "GRID_AUTH_TOKEN=t", "GRID_WHATEVER_ELSE=1", "HOME=/root", "GRIDX=1"}, f.fs)
	want := []string{
		"environment variable GRID_DATADIR names no setting of gridnode and is ignored (did you mean GRID_DATA_DIR?)",
		"environment variable GRID_LOG_LEVL names no setting of gridnode and is ignored (did you mean GRID_LOG_LEVEL?)",
		"environment variable GRID_WHATEVER_ELSE names no setting of gridnode and is ignored",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLogFormat: --log-format json writes one JSON object a line; another
// format is refused naming the flag.
func TestLogFormat(t *testing.T) {
	var buf bytes.Buffer
	newLogger(&buf, "json", slog.LevelInfo).Info("gridnode serving", "grpc", "127.0.0.1:7420")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line["msg"] != "gridnode serving" || line["grpc"] != "127.0.0.1:7420" {
		t.Fatalf("json log line %q: %v", buf.String(), err)
	}
	f := newServeFlags(&bytes.Buffer{})
	if _, err := f.load([]string{"--log-format", "xml"}, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	if err := f.validate(); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Fatalf("--log-format xml: %v, want an error naming the flag", err)
	}
}

// TestConfigPrintShowsEffectiveShards: config print shows what --shards 0
// comes to (the data directory's count, a new standalone grid's, or the
// cluster's), not the 0 that means "choose", and warns of a stray GRID_
// variable on stderr.
func TestConfigPrintShowsEffectiveShards(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("GRID_SHARD", "4")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--data-dir", dir}, "shards  1 (a new standalone grid)"},
		{[]string{"--data-dir", dir, "--join", "127.0.0.1:7422"}, "shards  the cluster's"},
		{[]string{"--data-dir", dir, "--shards", "4"}, "shards  4 "},
	} {
		var stdout, stderr bytes.Buffer
		if code := configCmd(append([]string{"print"}, c.args...), &stdout, &stderr); code != 0 {
			t.Fatalf("config print %v: exit %d: %s", c.args, code, stderr.String())
		}
		if !strings.Contains(strings.Join(strings.Fields(stdout.String()), " "), strings.Join(strings.Fields(c.want), " ")) {
			t.Errorf("config print %v:\n%s\nwant a line with %q", c.args, stdout.String(), c.want)
		}
		if !strings.Contains(stderr.String(), "GRID_SHARD names no setting") || !strings.Contains(stderr.String(), "GRID_SHARDS") {
			t.Errorf("config print with GRID_SHARD set: stderr %q, want a warning naming GRID_SHARDS", stderr.String())
		}
	}
	writeFile(t, filepath.Join(dir, "hard-settings.json"), `{"format":1,"digest":"d","slots":4096,"shards":3}`)
	var stdout bytes.Buffer
	if code := configCmd([]string{"print", "--data-dir", dir}, &stdout, &bytes.Buffer{}); code != 0 || !strings.Contains(stdout.String(), "3 (the data directory's)") {
		t.Errorf("config print of a data directory holding 3 shards: exit %d\n%s", code, stdout.String())
	}
}
