package testbed

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// SSHD is an OpenSSH server (Debian openssh-server) started by the test
// inside a network namespace, with a fresh host key and one client key
// authorised for root. Sessions get Bin first on their PATH, where stand-in
// commands (StandIn) replace the system's.
type SSHD struct {
	Addr          string        // ip:port inside the namespace
	HostKey       ssh.PublicKey // the key the server presents
	Client        ssh.Signer    // authorised for root
	ClientKeyFile string        // the same key as an OpenSSH private key file (mode 0600)
	Bin           string        // first directory on the sessions' PATH
	Proc          *Proc
	ns            *Netns
}

// StartSSHD runs `sshd -D -e -f CONFIG` in ns, listening on addr. sshd
// insists on its privilege separation directory /run/sshd; it gets one in a
// private mount namespace (a tmpfs over /run), so the machine's /run is
// not touched.
func StartSSHD(t testing.TB, ns *Netns, addr string) *SSHD {
	t.Helper()
	Need(t, "sshd", "unshare")
	dir := t.TempDir()
	hostSigner, hostPEM := newKey(t)
	client, clientPEM := newKey(t)
	s := &SSHD{Addr: addr, HostKey: hostSigner.PublicKey(), Client: client, Bin: filepath.Join(dir, "bin"), ns: ns,
		ClientKeyFile: filepath.Join(dir, "client_ed25519")}
	if err := os.Mkdir(s.Bin, 0o755); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	files := map[string][]byte{
		"host_ed25519":    hostPEM,
		"client_ed25519":  clientPEM,
		"authorized_keys": ssh.MarshalAuthorizedKey(client.PublicKey()),
		"sshd_config": fmt.Appendf(nil, `ListenAddress %s
Port %s
HostKey %s/host_ed25519
PidFile %s/sshd.pid
AuthorizedKeysFile %s/authorized_keys
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
AllowUsers root
PasswordAuthentication no
KbdInteractiveAuthentication no
PrintMotd no
SetEnv PATH=%s:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
LogLevel VERBOSE
`, host, port, dir, dir, dir, s.Bin),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sshd := must(Path("sshd"))
	script := "mount -t tmpfs -o mode=0755 tmpfs /run && mkdir -m 0755 /run/sshd && exec " + sshd + " -D -e -f " + dir + "/sshd_config"
	s.Proc = StartCmd(t, ns.Command(must(Path("unshare")), "--mount", "--propagation", "private", "sh", "-c", script))
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := ns.Dial("", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshd in %s not accepting on %s: %v\n%s", ns.Name, addr, err, s.Proc.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// Dial connects to the server from inside its namespace.
func (s *SSHD) Dial(network, addr string) (net.Conn, error) {
	return s.ns.Dial("", addr, 10*time.Second)
}

// newKey makes an ed25519 key and its OpenSSH private key file content.
func newKey(t testing.TB) (ssh.Signer, []byte) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return signer, pem.EncodeToMemory(block)
}

// NewSSHKey is a fresh ed25519 public key, e.g. a host key some other host
// presents.
func NewSSHKey(t testing.TB) ssh.PublicKey {
	s, _ := newKey(t)
	return s.PublicKey()
}

// StandIn is an executable shell script put in place of a system command
// (systemctl, …): it records each call's arguments, one line per call, and
// fails the calls FailNext asks it to.
type StandIn struct {
	path, log, fail string
}

// NewStandIn writes the stand-in for name into dir (e.g. SSHD.Bin).
func NewStandIn(t testing.TB, dir, name string) *StandIn {
	t.Helper()
	s := &StandIn{path: filepath.Join(dir, name), log: filepath.Join(dir, name+".calls"), fail: filepath.Join(dir, name+".fail")}
	script := fmt.Sprintf(`#!/bin/sh
echo "$*" >> '%s'
f='%s'
if [ -s "$f" ]; then
	read -r verb n < "$f"
	if [ "$1" = "$verb" ] && [ "$n" -gt 0 ]; then
		echo "$verb $((n - 1))" > "$f"
		echo "%s $1: failing as the test asked" >&2
		exit 1
	fi
fi
`, s.log, s.fail, name)
	if err := os.WriteFile(s.path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

// Calls are the argument lists of every call so far.
func (s *StandIn) Calls() []string {
	b, _ := os.ReadFile(s.log)
	out := strings.TrimSuffix(string(b), "\n")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// FailNext makes the next n calls whose first argument is verb fail
// (exit status 1).
func (s *StandIn) FailNext(t testing.TB, verb string, n int) {
	t.Helper()
	if err := os.WriteFile(s.fail, fmt.Appendf(nil, "%s %d\n", verb, n), 0o644); err != nil {
		t.Fatal(err)
	}
}
