package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"strings"

	"github.com/l4xg/grid/api"
)

// gossipKeygen prints a new gossip encryption key: 32 random bytes
// (AES-256), base64, a line of a --gossip-key-file.
//
// Rotating the key of a live cluster: add the new key as the file's last
// line on every node and send each SIGHUP (installed: every node decrypts
// with it); move it to the first line everywhere and SIGHUP (used: every
// node encrypts with it); remove the old line everywhere and SIGHUP
// (removed).
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
func tokenHash(in io.Reader, stdout, stderr io.Writer) int {
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
