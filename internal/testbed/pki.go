package testbed

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
	"testing"
	"time"
)

// ServerName is the name in the server certificate of every PKI: the name
// agents resolve and verify, while they dial the edges' IPs.
const ServerName = "ldap.edgefleet.test"

// PKI is a throwaway CA with a server certificate for ServerName and
// 127.0.0.1, a client certificate "agent" it issued and a client
// certificate "rogue" issued by another CA, all written as PEM files in
// Dir (ca.pem, server.pem, server.key, agent.pem, agent.key, rogue.pem,
// rogue.key) for the binaries and ldap-utils.
type PKI struct {
	Dir                  string
	Pool                 *x509.CertPool // the CA, for RootCAs and ClientCAs
	Server, Agent, Rogue tls.Certificate
}

// NewPKI makes a PKI in a temp dir of t.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p, err := NewPKIIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// NewPKIIn is NewPKI without a test (benchmarks), in dir.
func NewPKIIn(dir string) (*PKI, error) {
	p := &PKI{Dir: dir, Pool: x509.NewCertPool()}
	ca, caKey, err := p.ca("test CA", "ca.pem")
	if err != nil {
		return nil, err
	}
	p.Pool.AddCert(ca)
	other, otherKey, err := p.ca("other CA", "")
	if err != nil {
		return nil, err
	}
	if p.Server, err = p.issue("server", 2, true, ca, caKey); err != nil {
		return nil, err
	}
	if p.Agent, err = p.issue("agent", 3, false, ca, caKey); err != nil {
		return nil, err
	}
	if p.Rogue, err = p.issue("rogue", 4, false, other, otherKey); err != nil {
		return nil, err
	}
	return p, nil
}

// Path is the file name in Dir.
func (p *PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

func (p *PKI) ca(cn, file string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if file != "" {
		if err := p.write(file, "CERTIFICATE", der); err != nil {
			return nil, nil, err
		}
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func (p *PKI) issue(name string, serial int64, server bool, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (tls.Certificate, error) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{ServerName}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	if err := p.write(name+".pem", "CERTIFICATE", der); err != nil {
		return tls.Certificate{}, err
	}
	if err := p.write(name+".key", "EC PRIVATE KEY", kder); err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func (p *PKI) write(name, typ string, der []byte) error {
	return os.WriteFile(p.Path(name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
