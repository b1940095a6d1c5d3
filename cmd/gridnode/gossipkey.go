package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
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
