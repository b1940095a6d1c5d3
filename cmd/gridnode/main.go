// Command gridnode is the L4XG Grid server and its operator CLI.
//
//	gridnode serve [flags]            run a node (no flags: a single-node grid in ./gridnode-data)
//	gridnode demo [--nodes 3]         run a local cluster on loopback
//	gridnode config validate|print    check a config file; show the effective settings
//	gridnode reserve|complete|fail|release|extend|get|forget|status|audit|locate|drain [flags]
//
// Run "gridnode <command> -h" for the flags of a command.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/l4xg/grid/internal/buildinfo"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 1
	}
	switch verb := args[0]; verb {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "demo":
		return demo(args[1:], stdout, stderr)
	case "config":
		return configCmd(args[1:], stdout, stderr)
	case "gossip-keygen":
		return gossipKeygen(stdout, stderr)
	case "gossip-key":
		return gossipKeyCmd(args[1:], stdout, stderr)
	case "token-hash":
		return tokenHash(args[1:], os.Stdin, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "gridnode", buildinfo.Read(version))
		return 0
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		for _, v := range cliVerbs() {
			if v == verb {
				return runCLI(verb, args[1:], stdout, stderr)
			}
		}
		fmt.Fprintf(stderr, "gridnode: unknown command %q\n", verb)
		usage(stderr)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `usage: gridnode <command> [flags]

  serve      run a grid node (no flags: single node, data in ./gridnode-data,
             gRPC on 127.0.0.1:7420, metrics on 127.0.0.1:7423; with --join
             or --bootstrap-expect: a cluster member)
  demo       start a local cluster (--nodes 3) on loopback and print how to
             reach it
  %s
             operator commands against --addr (default 127.0.0.1:7420)
  config     validate FILE: check a config file; print [serve flags]: the
             effective settings of serve and where each comes from
  gossip-keygen
             print a new gossip encryption key (base64, 32 bytes) for
             --gossip-key-file
  gossip-key list|install|use|remove [--key BASE64]
             the gossip keyring of every node of the cluster (a rotation:
             install, use, remove)
  token-hash read a bearer token on stdin, print the sha256 a tokens file
             holds for it (--auth-tokens-file)
  version    print the version

Run "gridnode <command> -h" for the flags of a command.
`, strings.Join(cliVerbs(), ", "))
}

// isHelp reports an argument that asks for a command's help: it prints
// its usage and exits 0, as -h does for every command.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}
