// Package testpki makes the certificates the TLS tests use: a CA, a server
// certificate for 127.0.0.1 and localhost, a client certificate from that CA
// and one from another CA, written as PEM files.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ClientID is the URI name in the client certificates.
const ClientID = "spiffe://stepd.test/ns/ci/sa/go"

// PKI is the directory holding ca.pem, server.pem/.key, client.pem/.key
// (from the CA) and other.pem/.key (from another CA).
type PKI struct{ Dir string }

// Path is the path of one of the files.
func (p PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

// ServerArgs are the stepd flags for mutual TLS with these certificates;
// the client certificate's identity is an admin.
func (p PKI) ServerArgs() []string {
	return []string{
		"--tls-cert", p.Path("server.pem"),
		"--tls-key", p.Path("server.key"),
		"--tls-client-ca", p.Path("ca.pem"),
		"--tls-client-roles", p.Path("roles"),
	}
}

type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// New writes a fresh PKI into a temporary directory of t.
func New(t testing.TB) PKI {
	t.Helper()
	p := PKI{Dir: t.TempDir()}
	ca := p.ca(t, "stepd test CA", "ca.pem")
	other := p.ca(t, "another CA", "")
	uri, _ := url.Parse(ClientID)
	p.leaf(t, ca, "server", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "stepd"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:    []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	p.leaf(t, ca, "client", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "go client"},
		URIs:        []*url.URL{uri},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	p.leaf(t, other, "other", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "intruder"},
		URIs:        []*url.URL{uri},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err := os.WriteFile(p.Path("roles"), []byte(ClientID+" admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (p PKI) ca(t testing.TB, cn, file string) issuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-5 * time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if file != "" {
		p.write(t, file, "CERTIFICATE", der)
	}
	return issuer{cert, key}
}

func (p PKI) leaf(t testing.TB, by issuer, stem string, tmpl *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore = time.Now().Add(-5 * time.Minute)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, by.cert, &key.PublicKey, by.key)
	if err != nil {
		t.Fatal(err)
	}
	p.write(t, stem+".pem", "CERTIFICATE", der)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p.write(t, stem+".key", "PRIVATE KEY", keyDER)
}

func (p PKI) write(t testing.TB, name, kind string, der []byte) {
	t.Helper()
	data := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if err := os.WriteFile(p.Path(name), data, 0o600); err != nil {
		t.Fatal(err)
	}
}
