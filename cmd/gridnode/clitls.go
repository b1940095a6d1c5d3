package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/l4xg/grid/client"
)

// cliTLS are the CLI's TLS and auth flags, etcdctl's names but where the
// CLI's verbs use them already (--key is the idempotency key, --token the
// fencing token): --cacert, --cert, --cert-key, --server-name,
// --auth-token, --auth-token-file, each also read from its GRID_* variable
// (GRID_CACERT, GRID_CERT, GRID_CERT_KEY, GRID_SERVER_NAME,
// GRID_AUTH_TOKEN, GRID_AUTH_TOKEN_FILE) when the flag is not given. The
// variables let a deployment set them once for every CLI call in its
// pods (the Helm chart does).
type cliTLS struct {
	fs                                              *flag.FlagSet
	cacert, cert, key, serverName, token, tokenFile *string
}

// cliTLSFlags are the names of cliTLS's flags, whose GRID_* variables the
// CLI reads.
func cliTLSFlags() []string {
	return []string{"cacert", "cert", "cert-key", "server-name", "auth-token", "auth-token-file"}
}

func addTLSFlags(fs *flag.FlagSet) *cliTLS {
	return &cliTLS{
		fs:         fs,
		cacert:     fs.String("cacert", "", "CA bundle that verifies the node's certificate: dial over TLS (or GRID_CACERT)"),
		cert:       fs.String("cert", "", "client certificate, for a grid with --client-cert-auth (or GRID_CERT)"),
		key:        fs.String("cert-key", "", "the client certificate's key file (or GRID_CERT_KEY)"),
		serverName: fs.String("server-name", "", "the name to verify the node's certificate against, when the address dialled is not one of its names (127.0.0.1 inside a pod) (or GRID_SERVER_NAME)"),
		token:      fs.String("auth-token", "", "bearer token, for a grid with auth on (or GRID_AUTH_TOKEN)"),
		tokenFile:  fs.String("auth-token-file", "", "a file holding the bearer token (a mounted Secret), instead of --auth-token (or GRID_AUTH_TOKEN_FILE)"),
	}
}

// options are the client options the flags ask for (TLS, a token).
func (t *cliTLS) options(lookup func(string) (string, bool)) ([]client.Option, error) {
	conf, err := t.config(lookup)
	if err != nil {
		return nil, err
	}
	var out []client.Option
	if conf != nil {
		out = append(out, client.WithTLS(conf))
	}
	token := *t.token
	if *t.tokenFile != "" {
		if token != "" {
			return nil, errors.New("--auth-token and --auth-token-file: give one")
		}
		b, err := os.ReadFile(*t.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--auth-token-file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return nil, fmt.Errorf("--auth-token-file %s holds no token", *t.tokenFile)
		}
	}
	if token != "" {
		out = append(out, client.WithToken(token))
	}
	return out, nil
}

// config is the tls.Config the flags ask for, or nil for plaintext.
func (t *cliTLS) config(lookup func(string) (string, bool)) (*tls.Config, error) {
	set := map[string]bool{}
	t.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range map[string]*string{"cacert": t.cacert, "cert": t.cert, "cert-key": t.key, "server-name": t.serverName,
		"auth-token": t.token, "auth-token-file": t.tokenFile} {
		if !set[name] {
			if e, ok := lookup(envName(name)); ok {
				*v = e
			}
		}
	}
	if *t.cacert == "" && *t.cert == "" && *t.key == "" {
		if *t.serverName != "" {
			return nil, errors.New("--server-name is for TLS: give --cacert too")
		}
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: *t.serverName}
	if *t.cacert != "" {
		b, err := os.ReadFile(*t.cacert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--cacert %s holds no PEM certificate", *t.cacert)
		}
	}
	if (*t.cert == "") != (*t.key == "") {
		return nil, errors.New("--cert and --cert-key go together")
	}
	if *t.cert != "" {
		c, err := tls.LoadX509KeyPair(*t.cert, *t.key)
		if err != nil {
			return nil, fmt.Errorf("--cert, --cert-key: %w", err)
		}
		conf.Certificates = []tls.Certificate{c}
	}
	return conf, nil
}
