package serve

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// issue makes a certificate signed by parent (self-signed when parent is
// nil) for 127.0.0.1.
func issue(t *testing.T, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, ca bool) (*x509.Certificate, *ecdsa.PrivateKey, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        ca, BasicConstraintsValid: true,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// mTLS on the gRPC listener (a client without a certificate is refused) and
// TLS on the HTTP listener.
func TestTLS(t *testing.T) {
	caCert, caKey, _ := issue(t, "ca", nil, nil, true)
	_, _, serverPair := issue(t, "server", caCert, caKey, false)
	_, _, clientPair := issue(t, "client", caCert, caKey, false)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	o := Options{
		GRPCTLS: &tls.Config{Certificates: []tls.Certificate{serverPair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert},
		HTTPTLS: &tls.Config{Certificates: []tls.Certificate{serverPair}},
	}
	ts, _ := startTest(t, o)
	call := func(pair *tls.Certificate) error {
		cfg := &tls.Config{RootCAs: pool}
		if pair != nil {
			cfg.Certificates = []tls.Certificate{*pair}
		}
		conn, err := grpc.NewClient(ts.GRPCAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "test", Descriptors: []*rlv3.RateLimitDescriptor{desc("key1=value1")}})
		return err
	}
	if err := call(&clientPair); err != nil {
		t.Errorf("with a client certificate: %v", err)
	}
	if err := call(nil); err == nil {
		t.Errorf("without a client certificate: no error")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get("https://" + ts.HTTPAddr().String() + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTPS /healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err := http.Get("http://" + ts.HTTPAddr().String() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Errorf("plain HTTP on the TLS listener served /healthz")
		}
	}
}
