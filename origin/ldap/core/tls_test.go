package core_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/go-ldap/ldap/v3"
)

// pki is a throwaway CA with a server certificate for 127.0.0.1 and two
// client certificates, written as PEM files for ldap-utils.
type pki struct {
	dir                  string
	pool                 *x509.CertPool
	server, agent, other tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), pool: x509.NewCertPool()}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.pool.AddCert(ca)
	p.write(t, "ca.pem", "CERTIFICATE", caDER)
	issue := func(name string, serial int64, server bool) tls.Certificate {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		p.write(t, name+".pem", "CERTIFICATE", der)
		p.write(t, name+".key", "EC PRIVATE KEY", kder)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	p.server = issue("server", 2, true)
	p.agent = issue("agent", 3, false)
	p.other = issue("other", 4, false)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) {
	if err := os.WriteFile(filepath.Join(p.dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// bindLDAPS connects to addr over ldaps with cert as the client
// certificate and binds as alice, then unbinds.
func (p *pki) bindLDAPS(addr string, cert tls.Certificate) error {
	c, err := ldap.DialURL("ldaps://"+addr, ldap.DialWithTLSConfig(&tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{cert}}))
	if err != nil {
		return err
	}
	if err := c.Bind(alice, "alice-pw"); err != nil {
		c.Close()
		return err
	}
	return c.Unbind()
}

// fp is c's fingerprint as a pins file writes it.
func fp(c tls.Certificate) string {
	sum := sha256.Sum256(c.Certificate[0])
	return hex.EncodeToString(sum[:])
}

// pinsFor is the pins file with the one line that names c agent.
func pinsFor(t *testing.T, c tls.Certificate, agent string) map[string]string {
	t.Helper()
	pins, err := core.ParsePins([]byte(fp(c) + " " + agent + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return pins
}

// mTLS with pinned client certificates, over LDAPS and StartTLS: the pin's
// agent name is in every log line; an unpinned certificate is refused, and
// nothing but StartTLS passes before TLS.
func TestTLSAndPins(t *testing.T) {
	testbed.Need(t, "ldapwhoami")
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	p := newPKI(t)
	pins := pinsFor(t, p.agent, "agent-7")
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), func(c *core.Config) {
		c.TLSMode = core.TLSMTLS
		c.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}}
		c.Pins = pins
	})

	t.Run("ldaps", func(t *testing.T) {
		if err := p.bindLDAPS(h.addr, p.agent); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("starttls with ldapwhoami", func(t *testing.T) {
		cmd := exec.Command("ldapwhoami", "-x", "-ZZ", "-H", "ldap://"+h.addr, "-D", alice, "-w", "alice-pw")
		cmd.Env = append(os.Environ(), "LDAPTLS_CACERT="+p.path("ca.pem"), "LDAPTLS_CERT="+p.path("agent.pem"),
			"LDAPTLS_KEY="+p.path("agent.key"), "LDAPTLS_REQCERT=demand")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(strings.ToLower(string(out)), "dn:"+alice) {
			t.Fatalf("ldapwhoami -ZZ: %v\n%s", err, out)
		}
	})
	t.Run("unpinned certificate", func(t *testing.T) {
		if err := p.bindLDAPS(h.addr, p.other); err == nil {
			t.Fatal("an unpinned client certificate was accepted")
		}
	})
	t.Run("no TLS", func(t *testing.T) {
		c := h.dial(t)
		if err := c.Bind(alice, "alice-pw"); !ldap.IsErrorWithCode(err, ldap.LDAPResultConfidentialityRequired) {
			t.Fatalf("bind without TLS: %v, want confidentialityRequired", err)
		}
	})
	var agents []string
	for _, l := range h.logs.JSONLines("ldap op") {
		if l["op"] == "bind" && l["result"] == "success" {
			agents = append(agents, l["agent"].(string))
		}
	}
	if len(agents) != 2 || agents[0] != "agent-7" || agents[1] != "agent-7" {
		t.Errorf("agents of the successful binds: %v, want agent-7 twice", agents)
	}
}

// SetPins swaps the pins the next handshakes are checked against, StartTLS
// included: a removed pin is refused, an added one accepted and named in
// the log lines, a session opened before keeps working. An empty set,
// which mtls without client_ca refuses at the start, is refused and the
// running pins kept; with client_ca it means the chain alone decides.
func TestSetPins(t *testing.T) {
	testbed.Need(t, "ldapwhoami")
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	p := newPKI(t)
	agentPins := pinsFor(t, p.agent, "agent-7")
	otherPins := pinsFor(t, p.other, "other-8")
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), func(c *core.Config) {
		c.TLSMode = core.TLSMTLS
		c.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}}
		c.Pins = agentPins
	})
	whoami := func(name string) error {
		cmd := exec.Command("ldapwhoami", "-x", "-ZZ", "-o", "nettimeout=10", "-H", "ldap://"+h.addr, "-D", alice, "-w", "alice-pw")
		cmd.Env = append(os.Environ(), "LDAPTLS_CACERT="+p.path("ca.pem"), "LDAPTLS_CERT="+p.path(name+".pem"),
			"LDAPTLS_KEY="+p.path(name+".key"), "LDAPTLS_REQCERT=demand")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(strings.ToLower(string(out)), "dn:"+alice) {
			return fmt.Errorf("ldapwhoami -ZZ as %s: %v: %s", name, err, out)
		}
		return nil
	}
	held, err := ldap.DialURL("ldaps://"+h.addr, ldap.DialWithTLSConfig(&tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.agent}}))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := held.Bind(alice, "alice-pw"); err != nil {
		t.Fatal(err)
	}
	if err := whoami("other"); err == nil {
		t.Fatal("an unpinned certificate passed StartTLS")
	}

	if err := h.srv.SetPins(otherPins); err != nil {
		t.Fatal(err)
	}
	if err := whoami("agent"); err == nil {
		t.Error("the removed pin passed StartTLS")
	}
	if err := whoami("other"); err != nil {
		t.Error(err)
	}
	if _, err := held.WhoAmI(nil); err != nil {
		t.Errorf("the session opened before SetPins: %v", err)
	}
	if err := h.srv.SetPins(map[string]string{}); err == nil || !strings.Contains(err.Error(), "needs core.tls.pins or core.tls.client_ca") {
		t.Errorf("SetPins of no pins in mtls without client_ca: %v", err)
	}
	if got := h.srv.Pins(); len(got) != 1 || got[fp(p.other)] != "other-8" {
		t.Errorf("pins after a refused SetPins: %v", got)
	}
	if err := whoami("other"); err != nil {
		t.Errorf("after a refused SetPins: %v", err)
	}
	found := false
	for _, l := range h.logs.JSONLines("ldap op") {
		found = found || l["agent"] == "other-8"
	}
	if !found {
		t.Error("no log line names the added pin's agent")
	}

	ca := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), func(c *core.Config) {
		c.TLSMode = core.TLSMTLS
		c.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool}
		c.Pins = agentPins
	})
	if err := ca.srv.SetPins(nil); err != nil {
		t.Fatalf("SetPins of no pins with client_ca: %v", err)
	}
	if err := p.bindLDAPS(ca.addr, p.other); err != nil {
		t.Errorf("with client_ca and no pins, a certificate of the CA: %v", err)
	}
}

// Proxy mode 2 talks LDAPS to ssl:1 servers and verifies them against
// backend_ca; a server whose certificate does not verify is a connect
// failure (OFFLINE, failover).
func TestProxyMode2LDAPSBackends(t *testing.T) {
	p := newPKI(t)
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{TLSCert: p.path("server.pem"), TLSKey: p.path("server.key")})
	plain := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	for _, tc := range []struct {
		name   string
		pool   *x509.CertPool
		target string
	}{
		{"verified", p.pool, "S1"},
		{"unknown CA", x509.NewCertPool(), "PLAIN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, dlpFile(3, 60, []server{{"S1", sl[0].Addr, true}, {"PLAIN", plain[0].Addr, false}},
				proxy(nil, []string{"S1", "PLAIN"})), func(c *core.Config) {
				c.ProxyMode = 2
				c.BackendTLS = &tls.Config{RootCAs: tc.pool}
			})
			c := h.dial(t)
			if err := c.Bind(alice, "alice-pw"); err != nil {
				t.Fatal(err)
			}
			if got := h.targets("bind"); len(got) != 1 || got[0] != tc.target {
				t.Errorf("bind went to %v, want %s", got, tc.target)
			}
			if offline := h.srv.Health().Offline("S1"); offline != (tc.target != "S1") {
				t.Errorf("S1 offline = %v", offline)
			}
		})
	}
}

// Plain mode keeps the client side as configured: with tls.mode mtls an
// agent still needs LDAPS and a pinned certificate (a mistyped core.name,
// which falls back to plain mode, must not open the directory to anyone
// who reaches the core). The decrypted stream goes to default_server.
func TestPlainModeKeepsTLS(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	p := newPKI(t)
	pins := pinsFor(t, p.agent, "agent-7")
	h := newPlainHarness(t, "", func(c *core.Config) {
		c.DefaultServer = sl[0].Addr
		c.TLSMode = core.TLSMTLS
		c.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}}
		c.Pins = pins
	})
	if !h.srv.Plain() {
		t.Fatal("not plain mode")
	}
	t.Run("ldaps with a pinned certificate", func(t *testing.T) {
		if err := p.bindLDAPS(h.addr, p.agent); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "plain connection logged", func() bool { return len(h.logs.JSONLines("plain connection")) == 1 })
		if l := h.logs.JSONLines("plain connection")[0]; l["agent"] != "agent-7" {
			t.Errorf("plain connection line: agent %v, want agent-7", l["agent"])
		}
	})
	t.Run("unpinned certificate", func(t *testing.T) {
		if err := p.bindLDAPS(h.addr, p.other); err == nil {
			t.Fatal("bind with an unpinned certificate succeeded")
		}
	})
	t.Run("plain LDAP", func(t *testing.T) {
		c, err := ldap.DialURL("ldap://" + h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Bind(alice, "alice-pw"); err == nil {
			t.Fatal("bind without TLS succeeded")
		}
	})
}
