package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/pires/go-proxyproto"
)

// TestLocalFDExhaustionMarksNoOriginOffline: the edge under
// a low RLIMIT_NOFILE runs out of its own descriptors dialling healthy
// origins. Those dials ("socket: too many open files") never left the
// host: no origin is marked offline (they used to be, for offline_retry),
// the connections count as result="local-resources", and the first origin
// serves the next client at once. The metrics server's own net/http lines
// ("http: Accept error") come out through slog, not in std-log format.
func TestLocalFDExhaustionMarksNoOriginOffline(t *testing.T) {
	const nofile = 40
	a, b := echoOrigin(t, "A"), echoOrigin(t, "B")
	addr := testbed.FreeAddr(t, "127.0.0.1")
	metrics := testbed.FreeAddr(t, "127.0.0.1")
	path := testbed.WriteFile(t, t.TempDir(), "edge.yaml", "name: edge-bin\nlisten: ['"+addr+"']\nmetrics: '"+metrics+
		"'\nlog:\n  format: json\noffline_retry: 1m\nmax_conns: 100000\norigins: ['"+a+"', '"+b+"']\n") // above what 40 descriptors allow
	p := testbed.StartNofile(t, nofile, edgeBin(t), "--config", path)
	testbed.WaitTCP(t, addr, 10*time.Second)
	testbed.WaitTCP(t, metrics, 10*time.Second)

	// Stopped (SIGSTOP) while the flood's connections queue in its
	// backlog, the edge meets them all at once when it goes on: it accepts
	// and dials them in turn, a descriptor each, until none is left.
	// Which of the two meets the end is a matter of parity: either the
	// accept takes the last descriptor and its dial finds none ("out of
	// local resources"), or the dial takes it, the next accept fails and
	// the edge backs off, out of descriptors until the flood ends, so that
	// the metrics server's accept of the connections then waiting in its
	// backlog fails too ("http: Accept error"). Each round counts the
	// edge's descriptors once they are settled and, with an idle
	// keep-alive metrics connection (one descriptor of the edge's), makes
	// their parity the other one than the round before: two rounds see
	// both lines, a few more where a busy machine closed a descriptor
	// late.
	pid := p.Cmd.Process.Pid
	seen := func() bool {
		out := p.Output()
		return strings.Contains(out, "out of local resources") && strings.Contains(out, "http: Accept error")
	}
	parity := -1
	for round := 0; round < 10 && !seen(); round++ {
		n := settledFDs(t, pid)
		if parity = 1 - parity; round == 0 {
			parity = n % 2
		}
		if n%2 != parity {
			keepAlive(t, metrics)
		}
		p.Cmd.Process.Signal(syscall.SIGSTOP)
		closeAll := testbed.Flood(t, addr, nofile)
		p.Cmd.Process.Signal(syscall.SIGCONT)
		waitFDs(t, pid, func(n int) bool { return n >= nofile-1 }) // one comes and goes while dials fail
		var waiting []net.Conn
		for range 3 {
			if c, err := net.DialTimeout("tcp", metrics, time.Second); err == nil {
				waiting = append(waiting, c)
			}
		}
		time.Sleep(time.Second)
		closeAll()
		for _, c := range waiting {
			c.Close()
		}
	}
	testbed.WaitOutput(t, p, 10*time.Second, "out of local resources", "too many open files",
		`"msg":"http server error","endpoint":"metrics","err":"http: Accept error`)

	// Refused (local-resources) until the edge has closed the flood's
	// connections: a few tries within seconds.
	if tag, err := tagWithin(addr, 20*time.Second); tag != "A" {
		t.Errorf("the next client went to origin %q (%v), want A (the first, healthy)", tag, err)
	}
	out := p.Output()
	if strings.Contains(out, "origin offline") {
		t.Errorf("an origin was marked offline for a local resource error")
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "http: ") && !strings.HasPrefix(line, "{") {
			t.Errorf("a net/http line not through slog: %s", line)
		}
	}
	body := testbed.Scrape(t, metrics)
	if !regexp.MustCompile(`\nedgefleet_edge_connections_total\{result="local-resources"\} [1-9]`).MatchString(body) {
		t.Errorf("no connection counted as local-resources:\n%s", grepLines(body, "edgefleet_edge_connections_total"))
	}
	for _, o := range []string{"o1", "o2"} {
		if !strings.Contains(body, `edgefleet_edge_origin_up{origin="`+o+`"} 1`) {
			t.Errorf("origin %s not up:\n%s", o, grepLines(body, "edgefleet_edge_origin_up"))
		}
	}
}

// keepAlive opens a connection to the metrics server at addr, has one
// scrape answered on it (so the server holds it, one descriptor) and
// leaves it open, idle, until the test ends.
func keepAlive(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("keep-alive connection to the metrics server: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: metrics\r\n\r\n")
	resp, err := http.ReadResponse(r, nil)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err != nil {
		t.Fatalf("scrape on a keep-alive connection: %v", err)
	}
	c.SetDeadline(time.Time{})
}

// waitFDs waits, up to 5 s, until the count of pid's descriptors
// satisfies ok, and returns it (whatever it is after 5 s).
func waitFDs(t *testing.T, pid int, ok func(int) bool) int {
	t.Helper()
	n := testbed.OpenFDs(pid)
	for deadline := time.Now().Add(5 * time.Second); !ok(n) && time.Now().Before(deadline); n = testbed.OpenFDs(pid) {
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// settledFDs is the count of pid's descriptors once it held still for
// 200 ms (the edge closes a flood's descriptors after the test did).
func settledFDs(t *testing.T, pid int) int {
	t.Helper()
	last, since := testbed.OpenFDs(pid), time.Now()
	return waitFDs(t, pid, func(n int) bool {
		if n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= 200*time.Millisecond
	})
}

// tagWithin dials addr until a client gets the origin's tag, for up to
// within: an edge out of descriptors refuses, and one that backed off
// accepts late. It returns "" and the last error when none came.
func tagWithin(addr string, within time.Duration) (string, error) {
	var err error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
			continue
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 1)
		_, err = io.ReadFull(c, b)
		c.Close()
		if err == nil {
			return string(b), nil
		}
	}
	return "", err
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestMaxConnsFromNofile: under the RLIMIT_NOFILE of a default machine
// (20000) the edge's default max_conns is what fits in it (7898: 2.5
// descriptors a connection and a reserve), with no warning at start; a
// max_conns set above what fits starts with the warning.
func TestMaxConnsFromNofile(t *testing.T) {
	origin := echoOrigin(t, "A")
	for _, tc := range []struct {
		yaml, want string
		warn       bool
	}{
		{"", `"max_conns":7898`, false},
		{"max_conns: 100000\n", `"max_conns":100000`, true},
	} {
		addr := testbed.FreeAddr(t, "127.0.0.1")
		path := testbed.WriteFile(t, t.TempDir(), "edge.yaml", "listen: ['"+addr+"']\nmetrics: ''\nlog:\n  format: json\norigins: ['"+origin+"']\n"+tc.yaml)
		p := testbed.StartNofile(t, 20000, edgeBin(t), "--config", path)
		testbed.WaitOutput(t, p, 10*time.Second, `"msg":"edge listening"`)
		out := p.Output()
		if !strings.Contains(out, tc.want) {
			t.Errorf("%q: want %s in the start line:\n%s", tc.yaml, tc.want, out)
		}
		if got := strings.Contains(out, "max_conns needs more descriptors than RLIMIT_NOFILE"); got != tc.warn {
			t.Errorf("%q: warning %v, want %v:\n%s", tc.yaml, got, tc.warn, out)
		}
	}
}

// TestNoPortTowardOneOriginTriesTheNext: in a namespace whose ephemeral
// port range holds 4 ports, clients held through the edge use up every
// port toward origin A; the next client goes to origin B (another
// address: ports are per destination) instead of being refused as
// local-resources, and A is not marked offline.
func TestNoPortTowardOneOriginTriesTheNext(t *testing.T) {
	ns := testbed.NewNetns(t, "ports")
	ns.Run("ip", "addr", "add", "127.0.0.2/8", "dev", "lo")
	ns.Run("sysctl", "-qw", "net.ipv4.ip_local_port_range=40000 40003")
	tagged := func(addr, tag string) string {
		ln := ns.Listen(addr)
		testbed.ServeConns(t, ln, func(c net.Conn) {
			r := bufio.NewReader(c)
			if _, err := proxyproto.Read(r); err != nil {
				return
			}
			io.WriteString(c, tag)
			io.Copy(io.Discard, r)
		})
		return ln.Addr().String()
	}
	a, b := tagged("127.0.0.1:0", "A"), tagged("127.0.0.2:0", "B")
	path := testbed.WriteFile(t, t.TempDir(), "edge.yaml", "listen: ['127.0.0.1:6300']\nmetrics: '127.0.0.1:6301'\nlog:\n  format: json\norigins: ['"+a+"', '"+b+"']\n")
	p := testbed.StartCmd(t, ns.Command(edgeBin(t), "--config", path))
	testbed.WaitOutput(t, p, 10*time.Second, `"msg":"edge listening"`)
	client := func(port int) (net.Conn, string) {
		t.Helper()
		var c net.Conn
		err := ns.Do(func() error {
			d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: port}} // outside the range
			var err error
			c, err = d.Dial("tcp", "127.0.0.1:6300")
			return err
		})
		if err != nil {
			t.Fatalf("client from port %d: %v", port, err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		tag := make([]byte, 1)
		if _, err := io.ReadFull(c, tag); err != nil {
			return c, ""
		}
		return c, string(tag)
	}
	// Clients to A until its ports run out (the kernel may leave one of
	// the four unused); the next goes to B.
	i := 0
	for ; i < 8; i++ {
		tag := ""
		if _, tag = client(50000 + i); tag != "A" {
			if tag != "B" || i == 0 {
				t.Fatalf("client %d reached %q, want A until its ports run out, then B; log:\n%s", i, tag, p.Output())
			}
			break
		}
	}
	if i == 8 {
		t.Fatalf("8 clients reached A through 4 ports")
	}
	testbed.WaitOutput(t, p, 10*time.Second, `"msg":"no local port left toward an origin: trying the next, none marked offline","origin":"o1"`)
	if out := p.Output(); strings.Contains(out, "origin offline") {
		t.Errorf("A was marked offline for want of a local port:\n%s", out)
	}
}
