// Package testbed starts the real peers edgefleet's tests run against
// (HAProxy, nginx, slapd, named, network namespaces) as child processes of
// the test, in the test's temp dir, on loopback.
//
//	testbed.Need(t, "haproxy")                  // fails under CI=true, skips otherwise
//	addr := testbed.FreeAddr(t, "127.0.0.1")
//	p := testbed.Start(t, "haproxy", "-db", "-f", cfgPath)
//	testbed.WaitTCP(t, addr, 5*time.Second)
//
// Every process is killed and reaped by t.Cleanup; its combined output is
// kept and printed when the test fails.
package testbed

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/sbin"
)

// packages maps a binary to the Debian package that ships it, for the
// message a missing peer produces.
var packages = map[string]string{
	"haproxy":          "haproxy",
	"nginx":            "nginx-light",
	"slapd":            "slapd",
	"slapadd":          "slapd",
	"ldapsearch":       "ldap-utils",
	"ldapwhoami":       "ldap-utils",
	"ldapadd":          "ldap-utils",
	"ldapmodify":       "ldap-utils",
	"ldapdelete":       "ldap-utils",
	"ldapcompare":      "ldap-utils",
	"named":            "bind9",
	"nsupdate":         "bind9-dnsutils",
	"dig":              "bind9-dnsutils",
	"iptables":         "iptables",
	"iptables-legacy":  "iptables",
	"ip6tables":        "iptables",
	"ip6tables-legacy": "iptables",
	"ip":               "iproute2",
	"openssl":          "openssl",
	"promtool":         "prometheus",
	"docker":           "docker.io",
	"conntrack":        "conntrack",
	"sshd":             "openssh-server",
	"unshare":          "util-linux",
	"setpriv":          "util-linux",
	"ssh-agent":        "openssh-client",
	"ssh-add":          "openssh-client",
	"curl":             "curl",
	"cloud-init":       "cloud-init",
	"systemd-analyze":  "systemd",
}

// InCI reports whether the tests run under CI=true, where a missing peer
// fails instead of skipping.
func InCI() bool { return os.Getenv("CI") == "true" }

// Need makes sure every named binary is installed: under CI=true a missing
// one fails the test with what to install; elsewhere the test is skipped.
func Need(t testing.TB, bins ...string) {
	t.Helper()
	for _, b := range bins {
		if _, err := Path(b); err != nil {
			pkg := packages[b]
			if pkg == "" {
				pkg = b
			}
			msg := fmt.Sprintf("%s not found: install it (apt-get install %s, or run make deps)", b, pkg)
			if InCI() {
				t.Fatal(msg)
			}
			t.Skip(msg + " — skipped outside CI")
		}
	}
}

// NeedRoot is Need for tests that must be root (netns, iptables).
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		if InCI() {
			t.Fatal("this test needs root (network namespaces, iptables)")
		}
		t.Skip("needs root — skipped outside CI")
	}
}

// NeedIPv6Loopback makes sure ::1 can be listened on: under CI=true its
// absence fails the test, outside CI it skips it, as Need does.
func NeedIPv6Loopback(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err == nil {
		ln.Close()
		return
	}
	if InCI() {
		t.Fatalf("no IPv6 loopback (%v): the test needs ::1 on lo", err)
	}
	t.Skipf("no IPv6 loopback (%v) — skipped outside CI", err)
}

// Path finds b on PATH or in the sbin directories that Debian packages use
// and a non-root PATH may lack.
func Path(b string) (string, error) { return sbin.LookPath(b) }

// Proc is a running peer.
type Proc struct {
	Cmd *exec.Cmd
	out *Buffer
}

// Output is what the process wrote so far (stdout and stderr).
func (p *Proc) Output() string { return p.out.String() }

// Stop sends SIGTERM and waits up to five seconds, then kills.
func (p *Proc) Stop() {
	if p.Cmd.Process == nil || p.Cmd.ProcessState != nil {
		return
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		p.Cmd.Process.Kill()
		<-done
	}
}

// Start runs name with args in the background until the test ends.
func Start(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	return StartCmd(t, exec.Command(name, args...))
}

// StartCmd runs a prepared command in the background until the test ends.
func StartCmd(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	if !strings.Contains(cmd.Path, "/") {
		if p, err := Path(cmd.Path); err == nil {
			cmd.Path = p
		}
	}
	out := &Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	p := &Proc{Cmd: cmd, out: out}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("output of %s:\n%s", strings.Join(cmd.Args, " "), out.String())
		}
	})
	return p
}

// FreeAddr returns "ip:port" with a port free on ip right now, for a
// server the test starts next. The port is taken below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range), at random: a port the
// kernel handed out (":0") could be given again, before the server binds
// it, to the source port of any client connection on the machine — with
// the test packages running side by side, one did ("bind: address
// already in use"). Where the range leaves no room below it, ":0" it is.
func FreeAddr(t testing.TB, ip string) string {
	t.Helper()
	if lo := ephemeralLow(); lo > freeLow+1000 {
		for range 200 {
			port := freeLow + rand.IntN(lo-freeLow)
			if _, dup := handedOut.LoadOrStore(port, true); dup {
				continue // never twice in one process: its first taker may not have bound it yet
			}
			if ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port))); err == nil {
				ln.Close()
				return ln.Addr().String()
			}
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("free port on %s: %v", ip, err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// handedOut holds the ports FreeAddr returned in this process.
var handedOut sync.Map

// freeLow is the lowest port FreeAddr picks: above the well-known and
// registered services a test machine may run.
const freeLow = 20000

// ephemeralLow is the first port of this network namespace's ephemeral
// range, or 0 when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, _ := strconv.Atoi(f[0])
	return lo
}

// WaitTCP waits until addr accepts a TCP connection.
func WaitTCP(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not accepting after %v: %v", addr, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WriteFile writes content to name in dir and returns the path.
func WriteFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := dir + "/" + name
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
