// The tests that span the repository's Go modules.
//
// The client (client/), each broker adapter (client/<broker>/), the
// libraries they share with the server (digest/, api/gridpb/,
// internal/testwait/) and the client's tests against a real server
// (client/internal/servertest/) are modules of their own, so that a
// consumer importing the client does not take the server's dependencies
// into its module graph (docs/modules.md). `go test ./...` at the root
// reaches only the root module; TestNestedModules runs every other
// module's tests as part of it, with the same flags (-race, -short), and
// TestModulesAreTidy and TestConsumerModuleGraph check the split itself.
// They sit at the root, the first package go test ./... starts, because
// TestNestedModules is the longest of them all.
package grid

import (
	"bytes"
	"context"
	"go/version"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
)

// root is the repository's root directory, the root module's.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// nested returns the directories, relative to the root, of every module in
// the repository but the root module, in a stable order.
func nested(t *testing.T) []string {
	t.Helper()
	r := root(t)
	var mods []string
	err := filepath.WalkDir(r, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != r && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "go.mod" && filepath.Dir(path) != r {
			rel, _ := filepath.Rel(r, filepath.Dir(path))
			mods = append(mods, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(mods)
	if len(mods) == 0 {
		t.Fatal("no nested module found")
	}
	return mods
}

// goCmd runs the go command in dir with args and returns its combined
// output, failing t with it if the command fails.
func goCmd(t *testing.T, ctx context.Context, dir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	// The workspace, if one is set, must not change what a module builds
	// with: each is tested as a consumer would build it.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// testTimeout is what is left of the test binary's own deadline, less a
// margin to report in, or 20 minutes without one.
func testTimeout(t *testing.T) time.Duration {
	if d, ok := t.Deadline(); ok {
		return time.Until(d) - 30*time.Second
	}
	return 20 * time.Minute
}

// TestNestedModules runs `go test ./...` in every nested module, with -race
// when this test runs under it and -short when it is short: `go test ./...`
// at the root does not descend into other modules, and this makes it test
// them all.
func TestNestedModules(t *testing.T) {
	timeout := testTimeout(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"test", "-timeout", timeout.Round(time.Second).String()}
	if raceBuild() {
		args = append(args, "-race")
	}
	if testing.Short() {
		args = append(args, "-short")
	}
	args = append(args, "./...")
	r := root(t)
	// One module after another: each `go test` runs its packages side by
	// side already.
	for _, mod := range nested(t) {
		t.Run(mod, func(t *testing.T) {
			out := goCmd(t, ctx, filepath.Join(r, mod), args...)
			t.Log("\n" + strings.TrimSpace(out))
		})
	}
}

// raceBuild reports whether this test binary was built with -race.
func raceBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// TestModulesAreTidy: go mod tidy would change no module's go.mod or
// go.sum.
func TestModulesAreTidy(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: tidy may need the module proxy")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout(t))
	defer cancel()
	r := root(t)
	for _, mod := range append([]string{"."}, nested(t)...) {
		t.Run(mod, func(t *testing.T) {
			goCmd(t, ctx, filepath.Join(r, mod), "mod", "tidy", "-diff")
		})
	}
}

// serverModules are modules a consumer of the client must not find in its
// module graph: the server's (Raft, gossip, Pebble), and the benchmark's
// and the chaos tool's peers.
var serverModules = []string{
	"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "github.com/cockroachdb/pebble",
	"go.etcd.io/etcd", "k8s.io/", "sigs.k8s.io/", "github.com/redis/go-redis",
	"github.com/aws/", "github.com/Azure/", "github.com/twmb/franz-go", "github.com/nats-io/",
	"github.com/rabbitmq/", "github.com/l4xg/grid ",
}

// TestConsumerModuleGraph makes a consumer's module that imports the client,
// or the client and one adapter, and checks what `go mod tidy` puts in its
// module graph and go.sum: none of the server's modules, no other broker's
// client, and a go line no newer than that of the module it imports.
func TestConsumerModuleGraph(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: tidy may need the module proxy")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout(t))
	defer cancel()
	r := root(t)
	mods := nested(t)
	for _, c := range []struct {
		dir     string // of the module the consumer imports, relative to the root
		allowed string // the one broker client the consumer asked for
	}{
		{"client", ""},
		{"client/kafka", "github.com/twmb/franz-go"},
		{"client/rabbitmq", "github.com/rabbitmq/"},
	} {
		imp := "github.com/l4xg/grid/" + c.dir
		t.Run(c.dir, func(t *testing.T) {
			dir := t.TempDir()
			mod := "module example.com/consumer\n\ngo 1.25.0\n\nreplace (\n"
			for _, m := range mods {
				if m != "client/internal/servertest" {
					mod += "\tgithub.com/l4xg/grid/" + m + " => " + filepath.Join(r, m) + "\n"
				}
			}
			mod += ")\n"
			main := "package main\n\nimport _ \"" + imp + "\"\n\nfunc main() {}\n"
			for name, text := range map[string]string{"go.mod": mod, "main.go": main} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			goCmd(t, ctx, dir, "mod", "tidy")
			goCmd(t, ctx, dir, "build", "./...")
			graph := goCmd(t, ctx, dir, "list", "-m", "all")
			sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range append(strings.Split(graph, "\n"), strings.Split(string(sum), "\n")...) {
				for _, s := range serverModules {
					if strings.HasPrefix(line+" ", s) && (c.allowed == "" || !strings.HasPrefix(line, c.allowed)) {
						t.Errorf("a consumer of %s has %q in its module graph or go.sum", imp, line)
					}
				}
			}
			want := goLine(t, filepath.Join(r, c.dir, "go.mod"))
			if got := goLine(t, filepath.Join(dir, "go.mod")); version.Compare("go"+got, "go"+want) > 0 {
				t.Errorf("a consumer of %s needs go %s, newer than that module's go %s", imp, got, want)
			}
			t.Logf("%s: %d modules in the consumer's graph, go %s", imp, strings.Count(strings.TrimSpace(graph), "\n"), goLine(t, filepath.Join(dir, "go.mod")))
		})
	}
}

// goLine returns the go directive's version in the go.mod at path.
func goLine(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(data) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "go "); ok {
			return v
		}
	}
	t.Fatalf("%s has no go line", path)
	return ""
}
