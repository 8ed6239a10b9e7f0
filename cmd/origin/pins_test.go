package main

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/go-ldap/ldap/v3"
)

// TestSIGHUPReloadsPins: the origin binary's core in mtls mode with a pins
// file, slapd behind it, agents connecting through the front. The pinned
// agent's certificate gets in (Go crypto/tls and ldapsearch with
// LDAPTLS_CERT/KEY), the unpinned one does not. Then its pin is removed
// from the file, another certificate's added, and SIGHUP: a new connection
// with the removed pin is refused — a fresh handshake and a session
// resumed from a ticket issued before the reload alike, by Go crypto/tls
// and by openssl s_client -sess_in — the session the
// agent opened before the reload keeps working, and the newly pinned
// certificate is accepted, without a restart. A pins file that fails the
// check (a bad line; an empty set, which mtls without client_ca refuses)
// keeps the running pins.
func TestSIGHUPReloadsPins(t *testing.T) {
	testbed.Need(t, "ldapsearch")
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	pki := testbed.NewPKI(t)
	bin := buildOrigin(t)
	front, coreAddr := testbed.FreeAddr(t, "127.0.0.1"), testbed.FreeAddr(t, "127.0.0.1")
	dir := t.TempDir()
	agentPin, roguePin := certPin(pki.Agent)+" agent-1\n", certPin(pki.Rogue)+" rogue-1\n"
	pins := testbed.WriteFile(t, dir, "agents.pins", "# agents\n"+agentPin)
	cfg := mtlsOriginConfig(t, dir, front, coreAddr, sl[0].Addr, pki, fmt.Sprintf("    pins: %q\n", pins))
	p := testbed.Start(t, bin, "--config", cfg)
	testbed.WaitTCP(t, front, 10*time.Second)
	testbed.WaitTCP(t, coreAddr, 10*time.Second)

	// dial opens an LDAPS session through the front with cert, resuming
	// from cache when it holds a ticket, and reads the root DSE once (a
	// refused certificate shows at the first read in TLS 1.3).
	dial := func(cert tls.Certificate, cache tls.ClientSessionCache) (*ldap.Conn, bool, error) {
		t.Helper()
		c, err := net.DialTimeout("tcp", front, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(c, &tls.Config{ServerName: testbed.ServerName, RootCAs: pki.Pool,
			Certificates: []tls.Certificate{cert}, ClientSessionCache: cache})
		tc.SetDeadline(time.Now().Add(20 * time.Second))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, false, err
		}
		tc.SetDeadline(time.Time{})
		l := ldap.NewConn(tc, true)
		l.Start()
		l.SetTimeout(20 * time.Second)
		if err := rootDSE(l); err != nil {
			l.Close()
			return nil, false, err
		}
		return l, tc.ConnectionState().DidResume, nil
	}
	gets := func(cert tls.Certificate, cache tls.ClientSessionCache) (bool, error) {
		t.Helper()
		l, resumed, err := dial(cert, cache)
		if err == nil {
			l.Close()
		}
		return resumed, err
	}
	reload := func(content, want string) {
		t.Helper()
		n := strings.Count(p.Output(), want)
		if err := os.WriteFile(pins, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		p.Cmd.Process.Signal(syscall.SIGHUP)
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(p.Output(), want) == n {
			if time.Now().After(deadline) {
				t.Fatalf("no %s after SIGHUP:\n%s", want, p.Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	held, _, err := dial(pki.Agent, nil)
	if err != nil {
		t.Fatalf("the pinned agent was refused: %v\n%s", err, p.Output())
	}
	defer held.Close()
	if err := held.Bind(testbed.User("alice"), "alice-pw"); err != nil {
		t.Fatalf("bind on the pinned agent's session: %v", err)
	}
	cache := tls.NewLRUClientSessionCache(4)
	if _, err := gets(pki.Agent, cache); err != nil {
		t.Fatal(err)
	}
	if resumed, err := gets(pki.Agent, cache); err != nil || !resumed {
		t.Fatalf("the pinned agent's session ticket: resumed %v, err %v (the resumption case would prove nothing)", resumed, err)
	}
	if _, err := gets(pki.Rogue, nil); err == nil {
		t.Fatal("an unpinned certificate got in")
	}
	sess := filepath.Join(dir, "agent.sess")
	sClient := func(extra ...string) (string, error) {
		return testbed.SClient(t, front, pki.Path("ca.pem"), pki.Path("agent.pem"), pki.Path("agent.key"), extra...)
	}
	if out, err := sClient("-sess_out", sess); err != nil {
		t.Fatalf("openssl s_client -sess_out with the pinned agent: %v\n%s", err, out)
	}
	if out, err := sClient("-sess_in", sess); err != nil || !strings.Contains(out, "Reused, TLSv1.3") {
		t.Fatalf("openssl s_client -sess_in with the pinned agent did not resume (the revoked case would prove nothing): %v\n%s", err, out)
	}
	if err := ldapsearchAs(front, pki, "agent"); err != nil {
		t.Fatalf("ldapsearch with the pinned agent's certificate: %v", err)
	}
	if err := ldapsearchAs(front, pki, "rogue"); err == nil {
		t.Fatal("ldapsearch with an unpinned certificate got in")
	}

	// The agent's pin removed, rogue's added.
	reload("# agents\n"+roguePin, `"msg":"pins reloaded","pins":1,"was":1,"added":["rogue-1"],"removed":["agent-1"]`)
	if _, err := gets(pki.Agent, nil); err == nil {
		t.Error("a new connection with the removed pin got in")
	}
	if resumed, err := gets(pki.Agent, cache); err == nil {
		t.Errorf("the removed pin got in by resuming a session from its ticket (resumed %v)", resumed)
	}
	if err := ldapsearchAs(front, pki, "agent"); err == nil {
		t.Error("ldapsearch with the removed pin got in")
	}
	// TLS 1.3: the client has its Finished before the server's pin check
	// ends; the server answers with the alert and reads nothing more
	// (-ign_eof: s_client waits for it rather than leave when its input
	// closes).
	if out, err := sClient("-sess_in", sess, "-ign_eof"); err == nil || !strings.Contains(out, "alert bad certificate") {
		t.Errorf("openssl s_client -sess_in resumed the removed pin's session: %v\n%s", err, out)
	}
	if err := rootDSE(held); err != nil {
		t.Errorf("the session opened before the reload was dropped: %v", err)
	}
	if r, err := held.WhoAmI(nil); err != nil || !strings.EqualFold(r.AuthzID, "dn:"+testbed.User("alice")) {
		t.Errorf("the session opened before the reload lost its bind: %+v, %v", r, err)
	}
	if _, err := gets(pki.Rogue, nil); err != nil {
		t.Errorf("the newly pinned certificate was refused: %v", err)
	}
	if err := ldapsearchAs(front, pki, "rogue"); err != nil {
		t.Errorf("ldapsearch with the newly pinned certificate: %v", err)
	}
	testbed.WaitOutput(t, p, 10*time.Second, `"msg":"tls handshake"`, `client certificate is not pinned: sha256 `+certPin(pki.Agent))
	if strings.Contains(p.Output(), "need a restart") {
		t.Errorf("the reload asked for a restart:\n%s", p.Output())
	}

	// Files the check refuses keep the running pins.
	refused := `"msg":"reload failed, keeping the running configuration"`
	reload("not-a-fingerprint agent-1\n", refused)
	reload("# nobody\n", refused)
	if !strings.Contains(p.Output(), `core.tls.mode mtls needs core.tls.pins or core.tls.client_ca`) {
		t.Errorf("the empty set's refusal does not say why:\n%s", p.Output())
	}
	if _, err := gets(pki.Rogue, nil); err != nil {
		t.Errorf("a refused pins file dropped the running pins: %v", err)
	}
	if _, err := gets(pki.Agent, nil); err == nil {
		t.Error("a refused pins file brought a removed pin back")
	}
	if err := rootDSE(held); err != nil {
		t.Errorf("the session opened before the reloads was dropped: %v", err)
	}
}

// mtlsOriginConfig writes an origin.yaml in dir: the front on front, the
// core on coreAddr in mtls mode with the test PKI's server certificate and
// tls (more keys under core.tls, indented by four spaces), routing every
// user to the slapd at slapdAddr.
func mtlsOriginConfig(t *testing.T, dir, front, coreAddr, slapdAddr string, pki *testbed.PKI, tls string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(slapdAddr)
	dlp := testbed.WriteFile(t, dir, "ldap_proxy.json", fmt.Sprintf(`[
  {"object": "LdapServer", "name": "L1", "host": %q, "port": %s},
  {"object": "LdapProxy", "name": "ldapConfiguration", "default": ["L1"]}
]`, host, port))
	return testbed.WriteFile(t, dir, "origin.yaml", fmt.Sprintf(`front:
  listen: [%q]
  inner: %q
peers_api: ""
metrics: ""
log:
  format: json
core:
  listen: %q
  config: %q
  tls:
    mode: mtls
    cert: %q
    key: %q
%s`, front, coreAddr, coreAddr, dlp, pki.Path("server.pem"), pki.Path("server.key"), tls))
}

// certPin is the pin of cert: the SHA-256 of its DER, in hex.
func certPin(cert tls.Certificate) string {
	sum := sha256.Sum256(cert.Certificate[0])
	return hex.EncodeToString(sum[:])
}

func rootDSE(l *ldap.Conn) error {
	r, err := l.Search(ldap.NewSearchRequest("", ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 10, false,
		"(objectClass=*)", []string{"namingContexts"}, nil))
	if err != nil {
		return err
	}
	if len(r.Entries) != 1 || r.Entries[0].GetAttributeValue("namingContexts") != testbed.Suffix {
		return fmt.Errorf("root DSE: %d entries", len(r.Entries))
	}
	return nil
}

// ldapsearchAs reads the root DSE through addr with ldapsearch over LDAPS,
// presenting the PKI's certificate name (agent.pem, agent.key).
func ldapsearchAs(addr string, pki *testbed.PKI, name string) error {
	cmd := exec.Command("ldapsearch", "-x", "-LLL", "-o", "nettimeout=10", "-H", "ldaps://"+addr,
		"-b", "", "-s", "base", "(objectClass=*)", "namingContexts")
	cmd.Env = append(os.Environ(), "LDAPTLS_CACERT="+pki.Path("ca.pem"), "LDAPTLS_CERT="+pki.Path(name+".pem"),
		"LDAPTLS_KEY="+pki.Path(name+".key"), "LDAPTLS_REQCERT=demand")
	out, err := cmd.CombinedOutput()
	if err == nil && !strings.Contains(string(out), "namingContexts: "+testbed.Suffix) {
		err = fmt.Errorf("no namingContexts")
	}
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}
