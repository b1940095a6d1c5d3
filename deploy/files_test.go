package deploy

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/internal/gridproc"
)

var (
	buildOnce sync.Once
	staticBin string
	buildErr  error
)

// gridnode builds cmd/gridnode once, static, as deploy/docker/Dockerfile
// does (gridproc.BuildGridnode: CGO_ENABLED=0, -trimpath).
func gridnode(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deploy-test-")
		if err != nil {
			buildErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		staticBin, buildErr = gridproc.BuildGridnode(ctx, "", dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return staticBin
}

// TestStaticBinary: the binary the Dockerfile builds needs no dynamic
// loader, so it runs on distroless/static (no libc).
func TestStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gridnode")
	}
	f, err := elf.Open(gridnode(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatalf("gridnode built with CGO_ENABLED=0 has a %v program header: not static", p.Type)
		}
	}
	dockerfile, err := os.ReadFile("docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"CGO_ENABLED=0", "distroless/static", "USER 65532:65532", "./cmd/gridnode"}
	// go mod download, before the sources are copied, needs the go.mod of
	// every module the root module replaces with a directory.
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(gomod)) {
		if _, dir, ok := strings.Cut(line, "=> ./"); ok {
			dir = strings.TrimSpace(dir)
			want = append(want, "COPY "+dir+"/go.* "+dir+"/\n")
		}
	}
	for _, want := range want {
		if !strings.Contains(string(dockerfile), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// TestExampleConfigs: every config file under deploy/ is accepted by
// gridnode config validate, every GRID_* variable the environment files
// name (commented or not) is a setting, and the unit starts serve with a
// config file and reloads with SIGHUP.
func TestExampleConfigs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gridnode")
	}
	bin := gridnode(t)
	configs, err := filepath.Glob("systemd/example/*.yaml")
	if err != nil || len(configs) < 3 {
		t.Fatalf("example configs: %v %v", configs, err)
	}
	for _, c := range configs {
		if out, err := exec.Command(bin, "config", "validate", c).CombinedOutput(); err != nil {
			t.Errorf("config validate %s: %v\n%s", c, err, out)
		}
	}
	out, err := exec.Command(bin, "config", "print", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var settings map[string]any
	if err := json.Unmarshal(out, &settings); err != nil {
		t.Fatal(err)
	}
	envVar := regexp.MustCompile(`^#?\s*GRID_([A-Z0-9_]+)=`)
	f, err := os.Open("systemd/gridnode.env")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	named := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if m := envVar.FindStringSubmatch(sc.Text()); m != nil {
			named++
			name := strings.ToLower(strings.ReplaceAll(m[1], "_", "-"))
			if _, ok := settings[name]; !ok {
				t.Errorf("gridnode.env names GRID_%s, which is no setting", m[1])
			}
		}
	}
	if named == 0 {
		t.Error("gridnode.env names no GRID_* variable")
	}
	unit, err := os.ReadFile("systemd/gridnode.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ExecStart=/usr/local/bin/gridnode serve --config /etc/gridnode/grid.yaml", "ExecReload=/bin/kill -HUP $MAINPID",
		"User=gridnode", "NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=/var/lib/gridnode"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("gridnode.service lacks %q", want)
		}
	}
}
