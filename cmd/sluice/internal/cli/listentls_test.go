package cli

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
)

// handshake runs a TLS handshake over loopback between a server with cfg
// and a client presenting the certificate in files (none when empty), and
// returns the server's error.
func pair(cert, key string) [2]string { return [2]string{cert, key} }

func handshake(t *testing.T, cfg *tls.Config, roots *x509.CertPool, files [2]string) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		srvErr <- tls.Server(c, cfg).Handshake()
	}()
	ccfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	if files[0] != "" {
		pair, err := tls.LoadX509KeyPair(files[0], files[1])
		if err != nil {
			t.Fatal(err)
		}
		ccfg.Certificates = []tls.Certificate{pair}
	}
	c, err := tls.Dial("tcp", ln.Addr().String(), ccfg)
	if err == nil {
		c.Read(make([]byte, 1)) // a refusal comes as an alert after the client's handshake (TLS 1.3)
		c.Close()
	}
	return <-srvErr
}

// --grpc-tls-client-san (envoy's GRPC_CLIENT_TLS_SAN): a client certificate
// signed by the CA must also be valid for the name; without the CA the flag
// is an error.
func TestListenerClientSAN(t *testing.T) {
	x := redistest.NewTLS(t) // its server certificate is for 127.0.0.1
	mesh := pair(x.Leaf(t, "mesh", "envoy.mesh.local"))
	wild := pair(x.Leaf(t, "wild", "*.mesh.local"))
	other := pair(x.Leaf(t, "other", "other.local"))
	roots := x.ClientConfig().RootCAs
	cfg, err := tlsConfig("grpc", x.CertFile, x.KeyFile, x.CAFile, "envoy.mesh.local")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		files [2]string
		ok    bool
	}{{"the name", mesh, true}, {"a wildcard over it", wild, true}, {"another name", other, false}, {"no certificate", [2]string{}, false}} {
		err := handshake(t, cfg, roots, c.files)
		if (err == nil) != c.ok {
			t.Errorf("%s: server handshake error %v, want ok=%v", c.name, err, c.ok)
		}
		if c.name == "another name" && (err == nil || !strings.Contains(err.Error(), "envoy.mesh.local")) {
			t.Errorf("another name: %v, want an error naming envoy.mesh.local", err)
		}
	}
	plain, err := tlsConfig("grpc", x.CertFile, x.KeyFile, x.CAFile, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, plain, roots, other); err != nil {
		t.Errorf("no SAN asked, a certificate of the CA: %v", err)
	}
	if _, err := tlsConfig("http", x.CertFile, x.KeyFile, "", "envoy.mesh.local"); err == nil || !strings.Contains(err.Error(), "--http-tls-client-san wants --http-tls-client-ca") {
		t.Errorf("a SAN without a CA: %v", err)
	}
}
