package layout

import (
	"errors"
	"fmt"
	"go/build"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/l4xg/grid"

// pkg is what one package of the module imports outside the standard
// library: directly (imports), and directly or through other packages of
// the module (deps). Packages of the module are named by their directory
// ("digest", "api/gridpb"), others by their import path.
type pkg struct{ imports, deps []string }

// list reads every package of the module from its source, with go/build, so
// that the test's result is cached only as long as the files it read are
// unchanged.
func list(t *testing.T) map[string]pkg {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	direct := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		bp, err := build.ImportDir(path, 0)
		if err != nil {
			var none *build.NoGoError
			if errors.As(err, &none) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, path)
		var imports []string
		for _, imp := range bp.Imports {
			first, _, _ := strings.Cut(imp, "/")
			switch {
			case imp == module || strings.HasPrefix(imp, module+"/"):
				imports = append(imports, strings.TrimPrefix(imp, module+"/"))
			case strings.Contains(first, "."):
				imports = append(imports, imp)
			}
		}
		direct[filepath.ToSlash(rel)] = imports
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string]pkg{}
	for name, imports := range direct {
		seen := map[string]bool{}
		var walk func(string)
		walk = func(p string) {
			for _, imp := range direct[p] {
				if !seen[imp] {
					seen[imp] = true
					walk(imp)
				}
			}
		}
		walk(name)
		deps := slices.Sorted(maps.Keys(seen))
		pkgs[name] = pkg{imports, deps}
	}
	return pkgs
}

// TestLayout: the rules of docs/design.md section 6 that a compiler does not
// check.
func TestLayout(t *testing.T) {
	pkgs := list(t)
	get := func(name string) pkg {
		p, ok := pkgs[name]
		if !ok {
			t.Fatalf("package %s not found", name)
		}
		return p
	}
	// under: p is one of the packages, or inside one of the modules, of list.
	under := func(p string, list []string) bool {
		for _, l := range list {
			if p == l || strings.HasPrefix(p, l+"/") {
				return true
			}
		}
		return false
	}
	// onlyDeps: every dependency of name outside the standard library is
	// one of allowed, or inside one of them.
	onlyDeps := func(name string, allowed ...string) {
		for _, d := range get(name).deps {
			if !under(d, allowed) {
				t.Errorf("%s depends on %s; it may depend only on the standard library and %v", name, d, allowed)
			}
		}
	}
	// noDeps: name depends on no package with one of these prefixes.
	noDeps := func(name string, banned ...string) {
		for _, d := range get(name).deps {
			if under(d, banned) {
				t.Errorf("%s depends on %s, which it must not", name, d)
			}
		}
	}
	// noImports: name does not import one of these packages itself.
	noImports := func(name string, banned ...string) {
		for _, d := range get(name).imports {
			if slices.Contains(banned, d) {
				t.Errorf("%s imports %s, which it must not", name, d)
			}
		}
	}

	onlyDeps("digest", "github.com/dgryski/go-farm")
	onlyDeps("keyspace", "github.com/dgryski/go-farm", "digest", "internal/snapio")
	// The client: the generated API with its generated marshalling
	// (vtprotobuf's helpers, standard library only), digest, gRPC with
	// what it needs, and OpenTelemetry's API and gRPC instrumentation
	// (WithTracerProvider).
	onlyDeps("client", "api/gridpb", "github.com/planetscale/vtprotobuf/protohelpers", "digest", "github.com/dgryski/go-farm",
		"google.golang.org/grpc", "google.golang.org/protobuf", "go.opentelemetry.io/otel",
		"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc")
	noDeps("tiering", "github.com/hashicorp/raft", "shard", "cluster", "api", "node")
	noDeps("shard", "cluster", "api", "node", "github.com/hashicorp/memberlist")
	onlyDeps("cluster/topology", "digest", "github.com/dgryski/go-farm")
	// Gossip is membership only: no Raft, no shard (the clock probe that
	// rides on its pings is an interface it declares).
	onlyDeps("cluster/gossip", "cluster/topology", "digest", "github.com/dgryski/go-farm", "internal/dirsync",
		"github.com/hashicorp/memberlist", "github.com/hashicorp/go-msgpack")
	noDeps("cluster", "api", "node")
	// api talks to the cluster runtime through interfaces of its own.
	noImports("api", "raftlog", "cluster", "node")
	// The client and every adapter under it build without the server.
	// client/internal/servertest, a module of its own, holds their tests
	// against a real server: a package that imported it outside its tests
	// would have the server among its own deps.
	for name := range pkgs {
		if (name == "client" || strings.HasPrefix(name, "client/")) && !under(name, []string{"client/internal/servertest"}) {
			for _, err := range serverDeps(pkgs, name) {
				t.Error(err)
			}
		}
	}
}

// serverDeps lists the server packages (and the server's own modules:
// raft, memberlist, Pebble) that package name depends on, as errors: a
// consumer importing the client or one of its adapters must not build
// them. api/gridpb, the generated API, is the client's too.
func serverDeps(pkgs map[string]pkg, name string) []error {
	server := []string{"api", "shard", "cluster", "node", "raftlog", "tiering", "keyspace", "cmd", "chaos", "bench",
		"internal/gridtest", "internal/launch", "internal/gridproc",
		"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "github.com/cockroachdb/pebble"}
	var errs []error
	for _, d := range pkgs[name].deps {
		if d == "api/gridpb" {
			continue
		}
		for _, s := range server {
			if d == s || strings.HasPrefix(d, s+"/") {
				errs = append(errs, fmt.Errorf("%s depends on %s, a package of the server", name, d))
				break
			}
		}
	}
	return errs
}

// The adapters' rule catches an adapter that reaches the server, directly
// or through another package, and passes one that does not.
func TestServerDepsCatchesAnAdapter(t *testing.T) {
	pkgs := map[string]pkg{
		"client/kafka": {imports: []string{"client", "shard"}, deps: []string{"api/gridpb", "client", "digest", "keyspace", "shard"}},
		"client/sqs":   {imports: []string{"client"}, deps: []string{"api/gridpb", "client", "digest", "github.com/aws/aws-sdk-go-v2"}},
	}
	if errs := serverDeps(pkgs, "client/kafka"); len(errs) != 2 {
		t.Errorf("an adapter depending on shard and keyspace: %v, want two errors", errs)
	}
	if errs := serverDeps(pkgs, "client/sqs"); len(errs) != 0 {
		t.Errorf("an adapter on the client alone: %v, want none", errs)
	}
}
