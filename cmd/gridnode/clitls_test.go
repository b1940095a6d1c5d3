package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/internal/testcerts"
)

// TestCLIWithAPodsEnvironment: the CLI as the Helm chart's pods set it up
// for kubectl exec ... gridnode drain, with TLS and tokens on: GRID_CACERT,
// GRID_CERT, GRID_CERT_KEY and GRID_AUTH_TOKEN_FILE (the mounted Secrets),
// against a node whose certificate names only its DNS name. Dialled at
// 127.0.0.1, the CLI verifies it by that name (GRID_SERVER_NAME; the pods
// dial their advertised name instead, GRID_ADDR); without the name, the
// certificate is refused, and without the token file, the call.
func TestCLIWithAPodsEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gridnode process")
	}
	dir := t.TempDir()
	const podName = "grid-l4xg-grid-0.grid-l4xg-grid-peers.default.svc"
	ca, err := testcerts.NewCA("grid-ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(testcerts.Options{CommonName: podName, DNSNames: []string{podName}, IPs: nil})
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := leaf.Write(dir, "tls")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "node.token")
	tokens := filepath.Join(dir, "tokens.yaml")
	writeFile(t, tokenFile, "node-secret\n")
	writeFile(t, tokens, "tokens:\n  - {name: nodes, role: admin, sha256: "+api.HashToken("node-secret")+"}\n")
	p := startServe(t, filepath.Join(dir, "data"),
		"--cert-file", crt, "--key-file", key, "--trusted-ca-file", caFile, "--client-cert-auth",
		"--auth-tokens-file", tokens, "--auth-node-token-file", tokenFile)

	env := map[string]string{"GRID_ADDR": p.addr, "GRID_SERVER_NAME": podName, "GRID_CACERT": caFile,
		"GRID_CERT": crt, "GRID_CERT_KEY": key, "GRID_AUTH_TOKEN_FILE": tokenFile}
	for k, v := range env {
		t.Setenv(k, v)
	}
	if code, stdout, stderr := cli(t, "status"); code != 0 || !strings.Contains(stdout, "SHARD") && !strings.Contains(stdout, "shard") {
		t.Fatalf("status with the pod's environment: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// A standalone node refuses a drain as such (FailedPrecondition): the
	// call got through TLS and the token check to the node's answer.
	if code, _, stderr := cli(t, "drain", "--node", "grid-l4xg-grid-1"); code != exitInvalid || !strings.Contains(stderr, "standalone") {
		t.Fatalf("drain with the pod's environment: exit %d, %s; want the standalone node's refusal", code, stderr)
	}

	os.Unsetenv("GRID_SERVER_NAME")
	if code, _, stderr := cli(t, "status", "--timeout", "2s"); code == 0 || !strings.Contains(stderr, "certificate") {
		t.Errorf("status at 127.0.0.1 without the server name: exit %d, %s; want the certificate refused", code, stderr)
	}
	t.Setenv("GRID_SERVER_NAME", podName)
	os.Unsetenv("GRID_AUTH_TOKEN_FILE")
	if code, _, stderr := cli(t, "status"); code == 0 || !strings.Contains(strings.ToLower(stderr), "token") {
		t.Errorf("status without the token file: exit %d, %s; want the call refused for want of a token", code, stderr)
	}
}
