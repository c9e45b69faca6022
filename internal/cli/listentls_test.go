package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA is a certificate authority for a test, writing PEM files.
type testCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	ca := &testCA{dir: t.TempDir()}
	ca.cert, ca.key, _ = ca.issue(t, "ca", nil, true)
	ca.file = filepath.Join(ca.dir, "ca.pem")
	writePEMFile(t, ca.file, "CERTIFICATE", ca.cert.Raw)
	return ca
}

// issue makes a certificate for dns (names and IP addresses), signed by
// the CA (self-signed for the CA itself), and writes it and its key.
func (ca *testCA) issue(t *testing.T, name string, dns []string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey, [2]string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        isCA, BasicConstraintsValid: true,
	}
	for _, d := range dns {
		if ip := net.ParseIP(d); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, d)
		}
	}
	parent, parentKey := tmpl, key
	if ca.cert != nil {
		parent, parentKey = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	files := [2]string{filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")}
	writePEMFile(t, files[0], "CERTIFICATE", der)
	writePEMFile(t, files[1], "EC PRIVATE KEY", keyDER)
	return cert, key, files
}

func writePEMFile(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// handshake runs a TLS handshake over loopback between a server with cfg
// and a client presenting the certificate in files (none when empty), and
// returns the server's error.
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
	ca := newTestCA(t)
	_, _, server := ca.issue(t, "server", []string{"127.0.0.1"}, false)
	_, _, mesh := ca.issue(t, "mesh", []string{"envoy.mesh.local"}, false)
	_, _, wild := ca.issue(t, "wild", []string{"*.mesh.local"}, false)
	_, _, other := ca.issue(t, "other", []string{"other.local"}, false)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	cfg, err := tlsConfig("grpc", server[0], server[1], ca.file, "envoy.mesh.local")
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
	plain, err := tlsConfig("grpc", server[0], server[1], ca.file, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, plain, roots, other); err != nil {
		t.Errorf("no SAN asked, a certificate of the CA: %v", err)
	}
	if _, err := tlsConfig("http", server[0], server[1], "", "envoy.mesh.local"); err == nil || !strings.Contains(err.Error(), "--http-tls-client-san wants --http-tls-client-ca") {
		t.Errorf("a SAN without a CA: %v", err)
	}
}
