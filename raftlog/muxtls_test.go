package raftlog

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/internal/testcerts"
)

// muxPair is a Mux serving mutual TLS with a test CA and its group 1's
// layer, the client configuration that passes its check, and a second Mux
// dialling group 1 with it; made once per fuzzing process.
type muxPair struct {
	server *Mux
	group  net.Listener
	client *tls.Config
	dialer raft.StreamLayer // group 1 of a second Mux
}

func newMuxPair(f *testing.F) muxPair {
	ca, err := testcerts.NewCA("mux fuzz CA")
	if err != nil {
		f.Fatal(err)
	}
	leaf, err := ca.Issue(testcerts.Options{CommonName: "peer"})
	if err != nil {
		f.Fatal(err)
	}
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		f.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	server := &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	client := &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	m, err := ListenMux("127.0.0.1:0", MuxConfig{HeaderTimeout: time.Second, TLSServer: server, TLSClient: client})
	if err != nil {
		f.Fatal(err)
	}
	l, err := m.Layer(1)
	if err != nil {
		f.Fatal(err)
	}
	d, err := ListenMux("127.0.0.1:0", MuxConfig{HeaderTimeout: time.Second, TLSServer: server, TLSClient: client})
	if err != nil {
		f.Fatal(err)
	}
	dl, err := d.Layer(1)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		_ = d.Close()
		_ = m.Close()
	})
	return muxPair{server: m, group: l, client: client, dialer: dl}
}

// FuzzMuxHeaderBehindTLS sends arbitrary header bytes to a Mux over an
// authenticated TLS connection (what a peer holding a valid certificate
// could send): the Mux must neither crash nor stop accepting, and a
// well-formed header still reaches its group afterwards.
func FuzzMuxHeaderBehindTLS(f *testing.F) {
	for _, h := range sampleHeaders() {
		f.Add(appendHeader(nil, h))
	}
	f.Add([]byte{})
	f.Add([]byte("L4XM\x01\x00\x00\x00\x00\x00\x00\x00\x01\xffa:1"))
	p := newMuxPair(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		conn, err := tls.Dial("tcp", p.server.Addr().String(), p.client)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = conn.Write(b)
		_ = conn.CloseWrite()
		_, _ = conn.Read(make([]byte, 1))
		conn.Close()
		// The Mux still routes a well-formed header to its group.
		out, err := p.dialer.Dial(raft.ServerAddress(p.server.Addr().String()), time.Second)
		if err != nil {
			t.Fatalf("after %x, a well-formed dial failed: %v", b, err)
		}
		defer out.Close()
		accepted := make(chan error, 1)
		go func() {
			c, err := p.group.Accept()
			if err == nil {
				c.Close()
			}
			accepted <- err
		}()
		select {
		case err := <-accepted:
			if err != nil {
				t.Fatalf("after %x: accept: %v", b, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("after %x, a well-formed header did not reach its group", b)
		}
	})
}
