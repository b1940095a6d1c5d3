package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/l4xg/grid/shard"
	"go.yaml.in/yaml/v3"
)

// configFlag names the config file: a flag, and GRID_CONFIG.
const configFlag = "config"

// envPrefix starts the environment variable of every setting: the flag's
// name upper-cased, dashes as underscores (GRID_DATA_DIR).
const envPrefix = "GRID_"

// envName is the environment variable of flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// errFlagParse is a command line the flag package refused (it printed why).
var errFlagParse = errors.New("bad flags")

// Sources of a setting's value, in precedence order: a flag overrides the
// environment, which overrides the file, which overrides the default.
const (
	fromFlag    = "flag"
	fromEnv     = "env"
	fromFile    = "file"
	fromDefault = "default"
)

// settings are the effective values of serve's settings and where each
// came from.
type settings struct {
	file    string            // the config file, "" if none
	values  map[string]string // flag name -> value
	sources map[string]string // flag name -> fromFlag, fromEnv ("env GRID_X"), fromFile, fromDefault
}

// load parses args, then sets every flag the command line did not from its
// environment variable (lookup), or else from the config file (--config or
// GRID_CONFIG). A key of the file that is no setting, or a value a flag
// refuses, is an error naming it.
func (f *serveFlags) load(args []string, lookup func(string) (string, bool)) (settings, error) {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return settings{}, err
		}
		return settings{}, errFlagParse
	}
	if f.fs.NArg() > 0 {
		return settings{}, fmt.Errorf("unexpected arguments %q", f.fs.Args())
	}
	s := settings{values: map[string]string{}, sources: map[string]string{}}
	f.fs.Visit(func(fl *flag.Flag) { s.sources[fl.Name] = fromFlag })
	if s.sources[configFlag] == "" {
		if v, ok := lookup(envName(configFlag)); ok && v != "" {
			*f.configFile = v
			s.sources[configFlag] = fromEnv + " " + envName(configFlag)
		}
	}
	s.file = *f.configFile
	file := map[string]string{}
	if s.file != "" {
		var err error
		if file, err = readConfigFile(s.file, f.fs); err != nil {
			return settings{}, err
		}
	}
	var errs []error
	f.fs.VisitAll(func(fl *flag.Flag) {
		if s.sources[fl.Name] != "" {
			return
		}
		if v, ok := lookup(envName(fl.Name)); ok {
			if err := fl.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %v", envName(fl.Name), v, err))
			}
			s.sources[fl.Name] = fromEnv + " " + envName(fl.Name)
			return
		}
		if v, ok := file[fl.Name]; ok {
			if err := fl.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s: %q: %v", s.file, fl.Name, v, err))
			}
			s.sources[fl.Name] = fromFile
			return
		}
		s.sources[fl.Name] = fromDefault
	})
	if err := errors.Join(errs...); err != nil {
		return settings{}, err
	}
	f.fs.VisitAll(func(fl *flag.Flag) { s.values[fl.Name] = fl.Value.String() })
	return s, nil
}

// readConfigFile reads a YAML mapping of setting names to values. A list
// (join) is joined with commas; a key that names no setting is an error.
func readConfigFile(path string, fs *flag.FlagSet) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	out := map[string]string{}
	for k, v := range raw {
		if k == configFlag || fs.Lookup(k) == nil {
			return nil, fmt.Errorf("config file %s: unknown setting %q (the keys are gridnode serve's flag names)", path, k)
		}
		switch v := v.(type) {
		case nil:
			out[k] = ""
		case []any:
			parts := make([]string, len(v))
			for i, x := range v {
				parts[i] = fmt.Sprint(x)
			}
			out[k] = strings.Join(parts, ",")
		case map[string]any:
			return nil, fmt.Errorf("config file %s: %s: a mapping is not a value", path, k)
		default:
			out[k] = fmt.Sprint(v)
		}
	}
	return out, nil
}

// softSettings are reloaded on SIGHUP; any other setting needs a restart,
// and a reload that changes one is refused. (The hard settings stored in
// the data directory, --shards and --replicas, are refused at start too
// when they differ from what the directory holds.)
func softSettings() []string {
	return []string{"log-level", "hot-window", "hot-max-bytes", "shutdown-timeout"}
}

// reloader applies a changed config file to a running node.
type reloader struct {
	args  []string
	env   func(string) (string, bool)
	level *slog.LevelVar
	host  interface {
		SetTierPolicy(time.Duration, int64) error
	}
	log *slog.Logger
	// gossipKeys, when the node encrypts its gossip, installs the keys
	// of --gossip-key-file, re-read at each reload.
	gossipKeys func([][]byte) error

	mu       sync.Mutex
	current  settings
	shutdown time.Duration
}

// reload reads the config again (command line, environment and file, as
// at start) and applies the soft settings that changed. If a setting that
// needs a restart changed, nothing is applied and the refusal names it.
func (r *reloader) reload() {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := newServeFlags(io.Discard)
	next, err := f.load(r.args, r.env)
	if err == nil {
		err = f.validate()
	}
	if err != nil {
		r.log.Error("config reload refused", "err", err)
		return
	}
	var changed, refused []string
	for name, v := range next.values {
		if r.current.values[name] == v {
			continue
		}
		changed = append(changed, name)
		if !slices.Contains(softSettings(), name) {
			refused = append(refused, fmt.Sprintf("%s (%q -> %q)", name, r.current.values[name], v))
		}
	}
	sort.Strings(changed)
	sort.Strings(refused)
	if len(refused) > 0 {
		r.log.Error("config reload refused: settings that need a restart changed; nothing applied", "settings", strings.Join(refused, ", "))
		return
	}
	if r.gossipKeys != nil {
		keys, err := readGossipKeys(*f.gossipKeyFile)
		if err == nil {
			err = r.gossipKeys(keys)
		}
		if err != nil {
			r.log.Error("config reload refused: gossip keys", "err", err)
			return
		}
		r.log.Warn("gossip keys reloaded", "keys", len(keys))
	}
	if len(changed) == 0 {
		r.log.Info("config reloaded: nothing changed")
		return
	}
	if err := r.host.SetTierPolicy(*f.hotWindow, *f.hotMax); err != nil {
		r.log.Error("config reload refused", "err", err)
		return
	}
	r.level.Set(f.level())
	r.shutdown = *f.drain
	r.current = next
	r.log.Warn("config reloaded", "changed", strings.Join(changed, ", "), "log_level", *f.logLevel,
		"hot_window", *f.hotWindow, "hot_max_bytes", *f.hotMax, "shutdown_timeout", *f.drain)
}

// shutdownTimeout is --shutdown-timeout as last loaded.
func (r *reloader) shutdownTimeout() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shutdown == 0 {
		d, _ := time.ParseDuration(r.current.values["shutdown-timeout"])
		return d
	}
	return r.shutdown
}

// configCmd is "gridnode config validate FILE" and "gridnode config print
// [serve flags]".
func configCmd(args []string, stdout, stderr io.Writer) int {
	const usage = "usage: gridnode config validate FILE | gridnode config print [--json] [serve flags]"
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 1
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stdout, usage)
		return 0
	}
	switch args[0] {
	case "validate":
		if len(args) == 2 && isHelp(args[1]) {
			fmt.Fprintln(stdout, "usage: gridnode config validate FILE")
			return 0
		}
		if len(args) != 2 {
			fmt.Fprintln(stderr, "usage: gridnode config validate FILE")
			return 1
		}
		f := newServeFlags(stderr)
		// The file alone: no environment, no flags.
		if _, err := f.load([]string{"--" + configFlag, args[1]}, func(string) (string, bool) { return "", false }); err != nil {
			fmt.Fprintf(stderr, "config: %v\n", err)
			return 1
		}
		if err := f.validate(); err != nil {
			fmt.Fprintf(stderr, "config: %s: %v\n", args[1], err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok\n", args[1])
		return 0
	case "print":
		rest := args[1:]
		asJSON := false
		if i := slices.Index(rest, "--json"); i >= 0 {
			asJSON, rest = true, slices.Delete(slices.Clone(rest), i, i+1)
		}
		f := newServeFlags(stderr)
		s, err := f.load(rest, os.LookupEnv)
		if err == nil {
			err = f.validate()
		}
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if err != nil {
			if !errors.Is(err, errFlagParse) {
				fmt.Fprintf(stderr, "config: %v\n", err)
			}
			return 1
		}
		for _, w := range strayEnv(os.Environ(), f.fs) {
			fmt.Fprintln(stderr, "config: warning:", w)
		}
		s.values["shards"] = f.effectiveShards()
		printSettings(stdout, s, asJSON)
		return 0
	}
	fmt.Fprintf(stderr, "config: unknown command %q (validate, print)\n", args[0])
	return 1
}

// printSettings prints every setting, its value and its source.
func printSettings(w io.Writer, s settings, asJSON bool) {
	names := make([]string, 0, len(s.values))
	for n := range s.values {
		names = append(names, n)
	}
	sort.Strings(names)
	if asJSON {
		type row struct {
			Value  string `json:"value"`
			Source string `json:"source"`
			Reload bool   `json:"reload"`
		}
		out := map[string]row{}
		for _, n := range names {
			out[n] = row{s.values[n], s.sources[n], slices.Contains(softSettings(), n)}
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintln(w, string(b))
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tSOURCE\tON SIGHUP")
	for _, n := range names {
		reload := "restart"
		if slices.Contains(softSettings(), n) {
			reload = "reloaded"
		}
		src := s.sources[n]
		if src == fromFile {
			src += " " + s.file
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n, s.values[n], src, reload)
	}
	tw.Flush()
}

// cliEnv are the GRID_ variables the CLI reads (clitls.go, cli.go): not
// serve's settings, but not strays either.
func cliEnv() []string {
	out := []string{envAddr}
	for _, n := range cliTLSFlags() {
		out = append(out, envName(n))
	}
	return out
}

// strayEnv lists the warnings for the GRID_ variables of environ that name
// no setting of fs nor a variable of the CLI: a misspelt one would
// otherwise be ignored in silence. Each names the closest setting's
// variable when one is near.
func strayEnv(environ []string, fs *flag.FlagSet) []string {
	known := cliEnv()
	fs.VisitAll(func(fl *flag.Flag) { known = append(known, envName(fl.Name)) })
	known = append(known, envName(configFlag))
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || slices.Contains(known, name) {
			continue
		}
		msg := fmt.Sprintf("environment variable %s names no setting of gridnode and is ignored", name)
		if near := nearest(name, known); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

// nearest is the name of known closest to name, at most 3 edits away (or
// the same but for underscores), "" when none is.
func nearest(name string, known []string) string {
	best, bestD := "", 4
	squash := func(s string) string { return strings.ReplaceAll(s, "_", "") }
	for _, k := range known {
		d := editDistance(name, k)
		if squash(k) == squash(name) {
			d = 0
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// effectiveShards is what --shards comes to, as config print shows it: the
// flag's value when set, else the count the data directory holds, else
// the default of a new standalone grid or, for a cluster member, the
// cluster's (when it founds one: as few as give each founding node a
// replica).
func (f *serveFlags) effectiveShards() string {
	if *f.shards > 0 {
		return strconv.Itoa(*f.shards)
	}
	if hs, ok, err := shard.StoredSettings(*f.dataDir); ok && hs.Shards > 0 {
		return fmt.Sprintf("%d (the data directory's)", hs.Shards)
	} else if err != nil {
		return fmt.Sprintf("unknown: %v", err)
	}
	if f.clustered() {
		return "the cluster's (a new cluster: founding nodes / replicas, rounded up)"
	}
	return fmt.Sprintf("%d (a new standalone grid)", shard.DefaultShards)
}
