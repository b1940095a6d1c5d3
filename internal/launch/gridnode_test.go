package launch

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// The test binary doubles as a fake gridnode: with BENCH_FAKE_GRIDNODE set
// it prints its arguments and the ready lines, then waits for SIGTERM. In
// "cluster" mode it also answers ClusterMap on its --listen address (see
// fakeClusterNode).
func TestMain(m *testing.M) {
	switch os.Getenv("BENCH_FAKE_GRIDNODE") {
	case "":
		goleak.VerifyTestMain(m) // the reader and waiter of a stopped node are gone
		return
	case "exit":
		fmt.Fprintln(os.Stderr, "cannot start")
		os.Exit(2)
	case "cluster":
		os.Exit(fakeClusterNode(os.Args[1:]))
	default:
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		if err := os.WriteFile(os.Getenv("BENCH_FAKE_ARGS"), []byte(strings.Join(os.Args[1:], " ")), 0o644); err != nil {
			os.Exit(3)
		}
		fmt.Println("some log line")
		fmt.Println("ready: http 127.0.0.1:1111")
		fmt.Println("ready: grpc 127.0.0.1:2222")
		<-sig
		os.Exit(0)
	}
}

func TestStartGridnodeReadsReadyLinesAndStops(t *testing.T) {
	argsFile := t.TempDir() + "/args"
	t.Setenv("BENCH_FAKE_GRIDNODE", "serve")
	t.Setenv("BENCH_FAKE_ARGS", argsFile)
	g, err := StartGridnode(context.Background(), GridnodeOptions{Bin: os.Args[0], Shards: 4, Pprof: true})
	if err != nil {
		t.Fatal(err)
	}
	if g.Addr != "127.0.0.1:2222" || g.HTTPAddr != "127.0.0.1:1111" || g.PID() <= 0 {
		t.Fatalf("addr %q http %q pid %d", g.Addr, g.HTTPAddr, g.PID())
	}
	dir := g.dir
	g.Stop()
	b, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Fields(string(b))
	for _, want := range [][]string{{"--listen", "127.0.0.1:0"}, {"--http-listen", "127.0.0.1:0"}, {"--shards", "4"}, {"--data-dir", dir}} {
		i := slices.Index(args, want[0])
		if i < 0 || i+1 >= len(args) || args[i+1] != want[1] {
			t.Errorf("args %v lack %v", args, want)
		}
	}
	if !slices.Contains(args, "--pprof") || args[0] != "serve" {
		t.Errorf("args %v: want serve ... --pprof", args)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("data dir %s left after Stop: %v", dir, err)
	}
}

func TestStartGridnodeReportsEarlyExit(t *testing.T) {
	t.Setenv("BENCH_FAKE_GRIDNODE", "exit")
	if _, err := StartGridnode(context.Background(), GridnodeOptions{Bin: os.Args[0]}); err == nil || !strings.Contains(err.Error(), "exited before ready") {
		t.Fatalf("err %v", err)
	}
}

func TestModuleDir(t *testing.T) {
	wd, _ := os.Getwd()
	d, err := ModuleDir(wd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d + "/cmd/gridnode/serve.go"); err != nil {
		t.Fatal(err)
	}
	if _, err := ModuleDir("/"); err == nil {
		t.Fatal("found a module above /")
	}
}
