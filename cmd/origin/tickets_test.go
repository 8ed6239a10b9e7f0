package main

import (
	"crypto/tls"
	"errors"
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
	h.hup(t, want, func() {
		if err := os.WriteFile(h.keys, keys, 0o600); err != nil {
			t.Fatal(err)
		}
	})
}

// hup calls change (which changes the host's files), sends SIGHUP and
// waits for want in its output once more than before.
func (h *poolHost) hup(t *testing.T, want string, change func()) {
	t.Helper()
	n := strings.Count(h.p.Output(), want)
	change()
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

// TestTicketKeyFileRefusedAtStart: the origin binary refuses to start,
// with exit 2 and one line naming the key, before anything listens, on a
// ticket key file open to group or others (whoever reads it can mint
// tickets), on a FIFO at the path (at once: no wait for a writer), on a
// file over the limit (a sparse file of 200 MB: refused by its size, not
// read) and on a pins file that is a FIFO.
func TestTicketKeyFileRefusedAtStart(t *testing.T) {
	pki := testbed.NewPKI(t)
	bin := buildOrigin(t)
	keys := ticketkeys.Keys{ticketkeys.New()}.Format()
	for _, tc := range []struct {
		name string
		// make writes the ticket key file (or the pins file, pins) at path.
		make func(t *testing.T, path string) error
		pins bool
		want string // after "core.tls.ticket_key_file: <path> "
	}{
		{"mode 0644", func(t *testing.T, path string) error {
			if err := os.WriteFile(path, keys, 0o600); err != nil {
				return err
			}
			return os.Chmod(path, 0o644)
		}, false, "has mode 0644, open to group or others: anyone who can read it can mint session tickets (chmod 600 it)"},
		{"mode 0640", func(t *testing.T, path string) error {
			if err := os.WriteFile(path, keys, 0o600); err != nil {
				return err
			}
			return os.Chmod(path, 0o640)
		}, false, "has mode 0640, open to group or others"},
		{"fifo", func(t *testing.T, path string) error { return syscall.Mkfifo(path, 0o600) }, false, "is a named pipe (FIFO), not a regular file"},
		{"over the limit", func(t *testing.T, path string) error {
			if err := os.WriteFile(path, keys, 0o600); err != nil {
				return err
			}
			return os.Truncate(path, 200<<20)
		}, false, "is 209715200 bytes, more than 65536"},
		{"pins fifo", func(t *testing.T, path string) error { return syscall.Mkfifo(path, 0o600) }, true, "is a named pipe (FIFO), not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			front, coreAddr := testbed.FreeAddr(t, "127.0.0.1"), testbed.FreeAddr(t, "127.0.0.1")
			keyFile, pins := filepath.Join(dir, "ticket.keys"), filepath.Join(dir, "agents.pins")
			key, path := "core.tls.ticket_key_file", keyFile
			if tc.pins {
				key, path = "core.tls.pins", pins
				testbed.WriteFile(t, dir, "ticket.keys", string(keys))
			} else {
				testbed.WriteFile(t, dir, "agents.pins", certPin(pki.Agent)+" agent-1\n")
			}
			if err := tc.make(t, path); err != nil {
				t.Fatal(err)
			}
			cfg := mtlsOriginConfig(t, dir, front, coreAddr, "127.0.0.1:1", pki, fmt.Sprintf("    pins: %q\n    ticket_key_file: %q\n", pins, keyFile))
			out := refusedBeforeListening(t, bin, cfg, front, coreAddr)
			if want := key + ": " + path + " " + tc.want; !strings.Contains(out, want) {
				t.Fatalf("output %q, want one line with %q", out, want)
			}
		})
	}
}

// refusedBeforeListening runs the origin binary with cfg and wants it to
// end with exit 2 and one line, which it returns, without the front or
// the core (at addrs) ever accepting a connection (one that accepts is
// killed at once). An origin still running after a minute hung: it is
// killed and the test fails.
func refusedBeforeListening(t *testing.T, bin, cfg string, addrs ...string) string {
	t.Helper()
	cmd := exec.Command(bin, "--config", cfg)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	accepted := make(chan string, 1)
	go func() { // knock on the ports until the process is gone
		for {
			select {
			case <-exited:
				accepted <- ""
				return
			default:
			}
			for _, addr := range addrs {
				if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
					c.Close()
					accepted <- addr
					cmd.Process.Kill()
					return
				}
			}
		}
	}()
	hung := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	close(exited)
	if addr := <-accepted; addr != "" {
		t.Fatalf("%s accepted a connection: the origin started\n%s", addr, out.String())
	}
	if !hung.Stop() {
		t.Fatalf("the origin was still running after a minute: killed\n%s", out.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v, want 2\n%s", err, out.String())
	}
	got := out.String()
	if strings.Contains(got, "listening") || strings.Count(got, "\n") != 1 {
		t.Fatalf("output %q, want only one line", got)
	}
	return got
}

// TestTicketKeyFileReloadRefused: a pool host whose ticket key file is
// made 0644, then replaced by a FIFO, keeps the keys in force on each
// SIGHUP (a ticket issued before still resumes), logging reload failed
// with the reason; the FIFO does not hang the reload (it runs in the
// process's only signal loop): SIGTERM afterwards still stops the origin,
// exit 0, within its drain.
func TestTicketKeyFileReloadRefused(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	pki := testbed.NewPKI(t)
	bin := buildOrigin(t)
	h := startPoolHost(t, bin, sl[0].Addr, pki, ticketkeys.Keys{ticketkeys.New()}.Format())
	cache := tls.NewLRUClientSessionCache(1)
	if h.session(t, pki, cache) {
		t.Fatal("the first session resumed: the test proves nothing")
	}
	// The keys, new ones, that a refused file must not put in force.
	other := ticketkeys.Keys{ticketkeys.New()}.Format()

	h.hup(t, "has mode 0644, open to group or others", func() {
		if err := os.WriteFile(h.keys, other, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(h.keys, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	testbed.WaitOutput(t, h.p, 10*time.Second, `"msg":"reload failed, keeping the running configuration","err":"core.tls.ticket_key_file: `+h.keys+` has mode 0644`)
	if !h.session(t, pki, cache) {
		t.Fatal("a 0644 key file on SIGHUP changed the keys in force")
	}

	h.hup(t, "is a named pipe (FIFO), not a regular file", func() {
		if err := os.Remove(h.keys); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(h.keys, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	testbed.WaitOutput(t, h.p, 10*time.Second, `"msg":"reload failed, keeping the running configuration","err":"core.tls.ticket_key_file: `+h.keys+` is a named pipe`)
	if !h.session(t, pki, cache) {
		t.Fatal("a FIFO on SIGHUP changed the keys in force")
	}

	h.p.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- h.p.Cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the origin's exit after SIGTERM: %v\n%s", err, h.p.Output())
		}
	case <-time.After(drainTimeout + 30*time.Second):
		t.Fatalf("SIGTERM did not stop the origin within its drain (%v)\n%s", drainTimeout, h.p.Output())
	}
	if !strings.Contains(h.p.Output(), `"msg":"shutting down","signal":"terminated"`) {
		t.Errorf("no shutting down after SIGTERM:\n%s", h.p.Output())
	}
}

// TestTicketKeyFileUnusedNotRead: with TLS off, or session tickets off
// (ticket_keys 0), the origin reads core.tls.ticket_key_file neither at
// start nor on SIGHUP: a path that is a FIFO starts, with a warning that
// the file is not read, and SIGHUP finds the configuration unchanged.
func TestTicketKeyFileUnusedNotRead(t *testing.T) {
	pki := testbed.NewPKI(t)
	bin := buildOrigin(t)
	for _, tc := range []struct {
		name string
		tls  []string // keys under core.tls
	}{
		{"tls off", []string{`mode: "off"`}},
		{"ticket_keys 0", []string{"mode: tls", fmt.Sprintf("cert: %q", pki.Path("server.pem")), fmt.Sprintf("key: %q", pki.Path("server.key")), "ticket_keys: 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			front, coreAddr := testbed.FreeAddr(t, "127.0.0.1"), testbed.FreeAddr(t, "127.0.0.1")
			fifo := filepath.Join(t.TempDir(), "ticket.keys")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			core := []string{fmt.Sprintf("listen: %q", coreAddr), "proxy_mode: 0", "default_server: 127.0.0.1:1", "tls:",
				fmt.Sprintf("  ticket_key_file: %q", fifo)}
			for _, l := range tc.tls {
				core = append(core, "  "+l)
			}
			cfg := originYAML(t, front, coreAddr, "", nil, core)
			p := testbed.Start(t, bin, "--config", cfg)
			testbed.WaitTCP(t, coreAddr, 10*time.Second)
			testbed.WaitOutput(t, p, 10*time.Second, `"msg":"core.tls.ticket_key_file is not read: TLS or session tickets are off","file":"`+fifo+`"`)
			p.Cmd.Process.Signal(syscall.SIGHUP)
			testbed.WaitOutput(t, p, 10*time.Second, `"msg":"reload: configuration unchanged"`)
			if strings.Contains(p.Output(), "reload failed") {
				t.Fatalf("the reload read the file:\n%s", p.Output())
			}
		})
	}
}
