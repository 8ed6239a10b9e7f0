package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/ticketkeys"
	"github.com/go-ldap/ldap/v3"
)

// poolHost is one origin host of a pool in a test: the origin binary
// (front and core, mtls, the agent pinned) with its own copy of the
// pool's ticket key file.
type poolHost struct {
	front, keys string
	p           *testbed.Proc
}

func startPoolHost(t *testing.T, bin, slapd string, pki *testbed.PKI, keys []byte) *poolHost {
	t.Helper()
	dir := t.TempDir()
	h := &poolHost{front: testbed.FreeAddr(t, "127.0.0.1"), keys: testbed.WriteFile(t, dir, "ticket.keys", string(keys))}
	coreAddr := testbed.FreeAddr(t, "127.0.0.1")
	pins := testbed.WriteFile(t, dir, "agents.pins", certPin(pki.Agent)+" agent-1\n")
	cfg := mtlsOriginConfig(t, dir, h.front, coreAddr, slapd, pki, fmt.Sprintf("    pins: %q\n    ticket_key_file: %q\n", pins, h.keys))
	h.p = testbed.Start(t, bin, "--config", cfg)
	testbed.WaitTCP(t, h.front, 10*time.Second)
	testbed.WaitTCP(t, coreAddr, 10*time.Second)
	return h
}

// reload writes keys into the host's file, sends SIGHUP and waits for
// want in its output.
func (h *poolHost) reload(t *testing.T, keys []byte, want string) {
	t.Helper()
	n := strings.Count(h.p.Output(), want)
	if err := os.WriteFile(h.keys, keys, 0o600); err != nil {
		t.Fatal(err)
	}
	h.p.Cmd.Process.Signal(syscall.SIGHUP)
	for deadline := time.Now().Add(10 * time.Second); strings.Count(h.p.Output(), want) == n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q after SIGHUP:\n%s", want, h.p.Output())
		}
	}
}

// session opens an LDAPS session to the host as the pinned agent, from
// cache (resuming when it holds a ticket the host's keys decrypt), and
// reads the root DSE (which also takes the host's new tickets in).
func (h *poolHost) session(t *testing.T, pki *testbed.PKI, cache tls.ClientSessionCache) (resumed bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", h.front, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: testbed.ServerName, RootCAs: pki.Pool,
		Certificates: []tls.Certificate{pki.Agent}, ClientSessionCache: cache})
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake with %s: %v\n%s", h.front, err, h.p.Output())
	}
	l := ldap.NewConn(tc, true)
	l.Start()
	defer l.Close()
	l.SetTimeout(20 * time.Second)
	if err := rootDSE(l); err != nil {
		t.Fatalf("root DSE through %s: %v", h.front, err)
	}
	return tc.ConnectionState().DidResume
}

// TestPoolTicketKeysShared: two origin binaries (two hosts of a pool,
// each with its copy of one core.tls.ticket_key_file) in front of one
// slapd. An agent's session from host A resumes on host B, with Go
// crypto/tls and with openssl s_client -sess_out/-sess_in. A rotation
// (a key appended to both files, SIGHUP) keeps the tickets issued before
// it; once their key has left the files (keep 2) they no longer resume
// and the agent makes a full handshake. A broken file on
// SIGHUP changes nothing: the keys in force still resume.
func TestPoolTicketKeysShared(t *testing.T) {
	testbed.Need(t, "openssl")
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	pki := testbed.NewPKI(t)
	bin := buildOrigin(t)
	keys := ticketkeys.Keys{ticketkeys.New()}
	a := startPoolHost(t, bin, sl[0].Addr, pki, keys.Format())
	b := startPoolHost(t, bin, sl[0].Addr, pki, keys.Format())

	cache := tls.NewLRUClientSessionCache(1)
	if a.session(t, pki, cache) {
		t.Fatal("the first session resumed: the test proves nothing")
	}
	if !b.session(t, pki, cache) {
		t.Fatal("host A's ticket did not resume on host B")
	}
	sess := filepath.Join(t.TempDir(), "agent.sess")
	sClient := func(h *poolHost, extra ...string) string {
		out, err := testbed.SClient(t, h.front, pki.Path("ca.pem"), pki.Path("agent.pem"), pki.Path("agent.key"), extra...)
		if err != nil {
			t.Fatalf("openssl s_client %v: %v\n%s", extra, err, out)
		}
		return out
	}
	sClient(a, "-sess_out", sess)
	if out := sClient(b, "-sess_in", sess); !strings.Contains(out, "Reused, TLSv1.3") {
		t.Fatalf("openssl's session from host A was not resumed on host B:\n%s", out)
	}

	old := tls.NewLRUClientSessionCache(1) // a ticket under the first key
	a.session(t, pki, old)
	rotate := func() {
		keys = keys.Rotate(ticketkeys.New(), 2)
		for _, h := range []*poolHost{a, b} {
			h.reload(t, keys.Format(), "ticket keys reloaded")
		}
	}
	rotate()
	if !b.session(t, pki, old) {
		t.Fatal("after one rotation the ticket of the key before it no longer resumes")
	}
	a.reload(t, []byte("not a key\n"), "reload failed")
	if !a.session(t, pki, cache) {
		t.Fatal("a broken key file on SIGHUP changed the keys in force")
	}
	a.reload(t, keys.Format(), "reload: configuration unchanged")
	// The files hold the first key (it encrypts: the next-to-last) and
	// the second; the next rotation drops the first (keep 2).
	old = tls.NewLRUClientSessionCache(1)
	a.session(t, pki, old)
	rotate()
	if b.session(t, pki, old) {
		t.Fatal("a ticket whose key left the pool's files still resumed")
	}
}
