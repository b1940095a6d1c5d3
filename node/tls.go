package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// CertFiles are a certificate, its key and the CA bundle that verifies the
// other side, as files (PEM). They are re-read when one of them changes,
// at most once per reloadEvery, by the next TLS handshake: a certificate
// replaced on disk is served to new connections without a restart, and the
// connections open keep working.
type CertFiles struct {
	CertFile, KeyFile, CAFile string
}

func (f CertFiles) set() bool { return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" }

// TLSConfig is the node's TLS (etcd's flags, docs/design.md section 7). Zero:
// every port is plaintext.
type TLSConfig struct {
	// Client secures the client gRPC port and the HTTP port: the node's
	// certificate and key, and the CA bundle clients' certificates must
	// chain to when ClientCertAuth.
	Client         CertFiles
	ClientCertAuth bool
	// Peer secures node-to-node traffic: the Raft port (mutual TLS, always
	// verified against Peer.CAFile) and the calls nodes make to each
	// other's client port (forwarding, moves), where the node presents its
	// peer certificate. PeerAllowedNames, when set, are the names (DNS or
	// IP SANs, or the common name) a peer's certificate must carry one of.
	Peer             CertFiles
	PeerAllowedNames []string
}

// Validate checks that each pair is complete.
func (c TLSConfig) Validate() error {
	if c.Client.set() && (c.Client.CertFile == "" || c.Client.KeyFile == "") {
		return errors.New("node: TLS: the client port needs both a certificate and a key file")
	}
	if c.ClientCertAuth && c.Client.CAFile == "" {
		return errors.New("node: TLS: client certificate auth needs a trusted CA file")
	}
	if c.Peer.set() && (c.Peer.CertFile == "" || c.Peer.KeyFile == "" || c.Peer.CAFile == "") {
		return errors.New("node: TLS: peer TLS needs a certificate, a key and a trusted CA file")
	}
	if len(c.PeerAllowedNames) > 0 && !c.Peer.set() {
		return errors.New("node: TLS: peer allowed names need peer TLS")
	}
	return nil
}

// reloadEvery bounds how often a certSource looks at its files.
const reloadEvery = time.Second

// minTLS is the oldest TLS version any port accepts; Go prefers 1.3 when
// both sides have it.
const minTLS = tls.VersionTLS12

// certSource is a CertFiles kept loaded.
type certSource struct {
	files CertFiles
	log   *slog.Logger

	mu      sync.Mutex
	checked time.Time
	stamps  [3]string
	cert    *tls.Certificate
	pool    *x509.CertPool
	caPEM   []byte
}

// newCertSource loads f; a file that cannot be read or parsed is an error.
func newCertSource(f CertFiles, log *slog.Logger) (*certSource, error) {
	s := &certSource{files: f, log: log}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.checked = time.Now()
	return s, nil
}

// stamp is what tells a changed file: its size and modification time.
func stamp(path string) string {
	if path == "" {
		return ""
	}
	st, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	return fmt.Sprint(st.Size(), st.ModTime().UnixNano())
}

func (s *certSource) load() error {
	stamps := [3]string{stamp(s.files.CertFile), stamp(s.files.KeyFile), stamp(s.files.CAFile)}
	var cert *tls.Certificate
	if s.files.CertFile != "" {
		c, err := tls.LoadX509KeyPair(s.files.CertFile, s.files.KeyFile)
		if err != nil {
			return fmt.Errorf("node: TLS: %s, %s: %w", s.files.CertFile, s.files.KeyFile, err)
		}
		cert = &c
	}
	var pool *x509.CertPool
	var caPEM []byte
	if s.files.CAFile != "" {
		b, err := os.ReadFile(s.files.CAFile)
		if err != nil {
			return fmt.Errorf("node: TLS: trusted CA file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("node: TLS: trusted CA file %s holds no PEM certificate", s.files.CAFile)
		}
		caPEM = b
	}
	s.cert, s.pool, s.caPEM, s.stamps = cert, pool, caPEM, stamps
	return nil
}

// get returns the certificate and the CA pool, reloading them first when a
// file changed. A reload that fails keeps what was loaded, and says so.
func (s *certSource) get() (*tls.Certificate, *x509.CertPool) {
	cert, pool, _ := s.getPEM()
	return cert, pool
}

func (s *certSource) getPEM() (*tls.Certificate, *x509.CertPool, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.checked) >= reloadEvery {
		s.checked = time.Now()
		now := [3]string{stamp(s.files.CertFile), stamp(s.files.KeyFile), stamp(s.files.CAFile)}
		if now != s.stamps {
			if err := s.load(); err != nil {
				s.log.Error("TLS files changed but cannot be loaded; keeping the ones loaded", "err", err)
				s.stamps = now // say it once per change
			} else {
				s.log.Info("TLS files reloaded", "cert", s.files.CertFile, "ca", s.files.CAFile)
			}
		}
	}
	return s.cert, s.pool, s.caPEM
}

// unionPool is a pool of the certificates of every pool given (nil ones
// skipped).
func unionPool(sources ...*certSource) *x509.CertPool {
	out := x509.NewCertPool()
	for _, s := range sources {
		if s == nil {
			continue
		}
		if _, _, b := s.getPEM(); b != nil {
			out.AppendCertsFromPEM(b)
		}
	}
	return out
}

// serverTLS is the tls.Config of a port served with src's certificate.
// With verify, a client must present a certificate that chains to one of
// cas (and, with names, carries one of them).
func serverTLS(src *certSource, verify bool, names []string, cas ...*certSource) *tls.Config {
	return &tls.Config{
		MinVersion: minTLS,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, _ := src.get()
			c := &tls.Config{MinVersion: minTLS, Certificates: []tls.Certificate{*cert}}
			if verify {
				c.ClientAuth = tls.RequireAndVerifyClientCert
				c.ClientCAs = unionPool(cas...)
				if len(names) > 0 {
					c.VerifyConnection = func(cs tls.ConnectionState) error { return allowedName(cs, names) }
				}
			}
			return c, nil
		},
	}
}

// peerClientTLS is the tls.Config a node dials another node with: its peer
// certificate, and the other node's certificate verified against cas
// (re-read like the rest) and, with names, its names; without names, the
// address dialled must be among its SANs.
func peerClientTLS(src *certSource, names []string, cas ...*certSource) *tls.Config {
	return &tls.Config{
		MinVersion: minTLS,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if src == nil {
				return &tls.Certificate{}, nil // none to present
			}
			if cert, _ := src.get(); cert != nil {
				return cert, nil
			}
			return &tls.Certificate{}, nil
		},
		// The chain is verified below against the pool as it is now,
		// which a fixed RootCAs could not follow through a CA rotation.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("node: TLS: the peer sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			opts := x509.VerifyOptions{Roots: unionPool(cas...), Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			if len(names) == 0 {
				opts.DNSName = cs.ServerName
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return fmt.Errorf("node: TLS: peer certificate: %w", err)
			}
			if len(names) > 0 {
				return allowedName(cs, names)
			}
			return nil
		},
	}
}

// allowedName checks that the peer's certificate carries one of names.
func allowedName(cs tls.ConnectionState, names []string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("node: TLS: the peer sent no certificate")
	}
	c := cs.PeerCertificates[0]
	have := append(slices.Clone(c.DNSNames), c.Subject.CommonName)
	for _, ip := range c.IPAddresses {
		have = append(have, ip.String())
	}
	for _, n := range names {
		if slices.Contains(have, n) {
			return nil
		}
	}
	return fmt.Errorf("node: TLS: peer certificate names %v, none of the allowed %v", have, names)
}

// nodeTLS are the node's loaded certificates: nil where that side is
// plaintext.
type nodeTLS struct {
	client, peer *certSource
}

// loadTLS loads c's files, failing on any it cannot read or parse.
func loadTLS(c TLSConfig, log *slog.Logger) (nodeTLS, error) {
	var out nodeTLS
	if err := c.Validate(); err != nil {
		return out, err
	}
	var err error
	if c.Client.set() {
		if out.client, err = newCertSource(c.Client, log); err != nil {
			return out, err
		}
	}
	if c.Peer.set() {
		if out.peer, err = newCertSource(c.Peer, log); err != nil {
			return out, err
		}
	}
	return out, nil
}
