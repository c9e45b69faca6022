package redistest

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
	"strconv"
	"testing"
	"time"
)

// TLS is a certificate authority made for one test and the certificates
// it signed: a server certificate (for 127.0.0.1 and localhost, unless
// NewTLSFor names other hosts), which is a client certificate too, as Redis
// presents it to a cluster's other nodes and to a replica's master; and a
// client certificate. The PEM files are in a temporary directory.
type TLS struct {
	CAFile         string // the authority's certificate
	CertFile       string // the server's certificate
	KeyFile        string // the server's key
	ClientCertFile string // the client's certificate
	ClientKeyFile  string // the client's key

	roots  *x509.CertPool
	client tls.Certificate
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

// NewTLS makes a certificate authority and its certificates (ECDSA P-256,
// valid for a day) in a new temporary directory of t.
func NewTLS(t testing.TB) *TLS {
	t.Helper()
	return NewTLSFor(t)
}

// NewTLSFor is NewTLS with a server certificate for hosts (IP addresses or
// DNS names) instead of 127.0.0.1 and localhost: one for a name the test
// does not dial checks that clients verify it, or are told not to.
func NewTLSFor(t testing.TB, hosts ...string) *TLS {
	t.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	x, err := newTLS(t.TempDir(), hosts)
	if err != nil {
		t.Fatalf("redistest: TLS certificates: %v", err)
	}
	return x
}

func newTLS(dir string, hosts []string) (*TLS, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	x := &TLS{
		CAFile:         filepath.Join(dir, "ca.pem"),
		CertFile:       filepath.Join(dir, "server.pem"),
		KeyFile:        filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
		roots:          x509.NewCertPool(),
		dir:            dir,
		ca:             ca,
		caKey:          caKey,
	}
	x.roots.AddCert(ca)
	if err := writePEM(x.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	if err := x.issue("redistest server", hosts, x.CertFile, x.KeyFile); err != nil {
		return nil, err
	}
	if err := x.issue("redistest client", nil, x.ClientCertFile, x.ClientKeyFile); err != nil {
		return nil, err
	}
	if x.client, err = tls.LoadX509KeyPair(x.ClientCertFile, x.ClientKeyFile); err != nil {
		return nil, err
	}
	return x, nil
}

// Leaf makes another certificate of the authority, named name, for hosts
// (IP addresses or DNS names; none: a client's only), usable by a client and
// by a server, and returns its PEM files.
func (x *TLS) Leaf(t testing.TB, name string, hosts ...string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(x.dir, name+".pem"), filepath.Join(x.dir, name+"-key.pem")
	if err := x.issue(name, hosts, certFile, keyFile); err != nil {
		t.Fatalf("redistest: certificate %s: %v", name, err)
	}
	return certFile, keyFile
}

// issue writes a certificate of the authority for hosts and its key: a
// client's, and a server's too when it names hosts.
func (x *TLS) issue(name string, hosts []string, certFile, keyFile string) error {
	now := time.Now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	x.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1 + x.serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, x.ca, &key.PublicKey, x.caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyFile, "EC PRIVATE KEY", keyDER)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// ClientConfig returns a TLS configuration that trusts the authority and
// presents the client certificate.
func (x *TLS) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: x.roots, Certificates: []tls.Certificate{x.client}, MinVersion: tls.VersionTLS12}
}

// serverArgs are redis-server's arguments to serve TLS on port with x's
// certificates, requiring client certificates; a cluster's bus and a
// replica's link to its master use TLS too when asked.
func (x *TLS) serverArgs(port int, cluster, replication bool) []string {
	args := []string{
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", x.CertFile,
		"--tls-key-file", x.KeyFile,
		"--tls-ca-cert-file", x.CAFile,
		"--tls-auth-clients", "yes",
	}
	if cluster {
		args = append(args, "--tls-cluster", "yes")
	}
	if replication {
		args = append(args, "--tls-replication", "yes")
	}
	return args
}

// tlsAddr is the 127.0.0.1 address of port.
func tlsAddr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
