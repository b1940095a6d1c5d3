package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/cluster/gossip"
)

// gossipKeygen prints a new gossip encryption key: 32 random bytes
// (AES-256), base64, a line of a --gossip-key-file.
//
// Rotating the key of a live cluster: gridnode gossip-key install, then
// use, then remove (gossipKeyCmd); or, by files, add the new key as the
// key file's last line on every node and SIGHUP each, move it first and
// SIGHUP, delete the old line and SIGHUP.
func gossipKeygen(stdout, stderr io.Writer) int {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		fmt.Fprintf(stderr, "gossip-keygen: %v\n", err)
		return 2
	}
	fmt.Fprintln(stdout, base64.StdEncoding.EncodeToString(k))
	return 0
}

// tokenHash reads a bearer token (its first line) on in and prints the
// SHA-256 a tokens file holds for it: tokens never sit in a file in clear.
func tokenHash(args []string, in io.Reader, stdout, stderr io.Writer) int {
	const usage = "usage: gridnode token-hash < TOKEN_FILE  (prints the sha256 a tokens file holds for the token on stdin)"
	if len(args) > 0 {
		if isHelp(args[0]) {
			fmt.Fprintln(stdout, usage)
			return 0
		}
		fmt.Fprintln(stderr, usage)
		return 1
	}
	b, err := io.ReadAll(io.LimitReader(in, 4096))
	if err != nil {
		fmt.Fprintf(stderr, "token-hash: %v\n", err)
		return 2
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	if tok = strings.TrimSpace(tok); tok == "" {
		fmt.Fprintln(stderr, "token-hash: no token on stdin")
		return 1
	}
	fmt.Fprintln(stdout, api.HashToken(tok))
	return 0
}

// gossipKeyCmd is "gridnode gossip-key list|install|use|remove": the
// action on the gossip keyring of every node of the cluster map that
// --addr's node holds, one node after the other. A rotation is three runs:
// install the new key everywhere, use it everywhere, remove the old one.
// Each node keeps its keyring in its data directory (gossip.keyring).
func gossipKeyCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gridnode gossip-key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := addAddrFlag(fs, os.LookupEnv)
	keyB64 := fs.String("key", "", "the key (base64) to install, use or remove")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	tlsFlags := addTLSFlags(fs)
	usage := "usage: gridnode gossip-key list|install|use|remove [--key BASE64] [--addr A] [TLS and token flags]"
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return exitInvalid
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stdout, usage)
		return exitOK
	}
	action := map[string]gridpb.GossipKeyAction{
		"list": gridpb.GossipKeyAction_GOSSIP_KEY_LIST, "install": gridpb.GossipKeyAction_GOSSIP_KEY_INSTALL,
		"use": gridpb.GossipKeyAction_GOSSIP_KEY_USE, "remove": gridpb.GossipKeyAction_GOSSIP_KEY_REMOVE,
	}[args[0]]
	err := fs.Parse(args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil || action == gridpb.GossipKeyAction_GOSSIP_KEY_UNSPECIFIED {
		fmt.Fprintln(stderr, usage)
		return exitInvalid
	}
	var key []byte
	if action != gridpb.GossipKeyAction_GOSSIP_KEY_LIST {
		keys, err := gossip.ParseKeys(*keyB64)
		if err != nil || len(keys) != 1 {
			fmt.Fprintf(stderr, "gridnode gossip-key %s: --key: one base64 key (16, 24 or 32 bytes): %v\n", args[0], err)
			return exitInvalid
		}
		key = keys[0]
	}
	tlsConf, err := tlsFlags.config(os.LookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "gridnode gossip-key: %v\n", err)
		return exitInvalid
	}
	more, _ := tlsFlags.options(os.LookupEnv)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, err := client.Dial(ctx, *addr, append(more, client.WithoutRouting(), client.WithDialOptions(gridpb.WithCaller(gridpb.CallerTool)...))...)
	if err != nil {
		fmt.Fprintf(stderr, "gridnode gossip-key: %v\n", err)
		return exitUnreachable
	}
	defer c.Close()
	m, err := c.ClusterMap(ctx)
	if err != nil || m.Standalone {
		fmt.Fprintf(stderr, "gridnode gossip-key: the cluster map from %s: %v (standalone: %v)\n", *addr, err, m.Standalone)
		return exitUnreachable
	}
	creds := insecure.NewCredentials()
	if tlsConf != nil {
		creds = credentials.NewTLS(tlsConf)
	}
	failed := false
	for _, n := range m.Nodes {
		if n.State == "removed" {
			continue
		}
		out, err := gossipKeyOn(ctx, n.GRPCAddr, creds, *tlsFlags.token, &gridpb.GossipKeysRequest{Action: action, Key: key})
		if err != nil {
			failed = true
			fmt.Fprintf(stdout, "%s\t%s\terror: %v\n", n.ID, n.GRPCAddr, err)
			continue
		}
		fmt.Fprintf(stdout, "%s\t%s\tprimary %s\tkeys %s\n", n.ID, n.GRPCAddr, first(out.GetFingerprints()), strings.Join(out.GetFingerprints(), ","))
	}
	if failed {
		return exitUnreachable
	}
	return exitOK
}

func first(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return s[0]
}

// gossipKeyOn sends req to the node at addr, as a tool's call
// (gridpb.CallerTool).
func gossipKeyOn(ctx context.Context, addr string, creds credentials.TransportCredentials, token string, req *gridpb.GossipKeysRequest) (*gridpb.GossipKeysResponse, error) {
	conn, err := grpc.NewClient(addr, append(gridpb.WithCaller(gridpb.CallerTool), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, api.MetadataAuthorization, "Bearer "+token)
	}
	return gridpb.NewGridClient(conn).GossipKeys(ctx, req)
}
