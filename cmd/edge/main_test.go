package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/deploy/monitoring"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/pires/go-proxyproto"
)

// edgeBin builds this command once per test run and returns the binary.
func edgeBin(t *testing.T) string { return testbed.Build(t, "github.com/edgefleet/edgefleet/cmd/edge") }

func TestMain(m *testing.M) { testbed.Main(m) }

// TestBadConfig runs the binary with bad values and unknown keys: exit
// status 2 and exactly one line on stderr naming the key.
func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		args, env  []string
		want       string
	}{
		{name: "unknown key", yaml: "origins: [o:1]\nlisten_on: [':1']\n", want: `unknown key "listen_on"`},
		{name: "unknown log key", yaml: "origins: [o:1]\nlog:\n  colour: red\n", want: `unknown key "log.colour"`},
		{name: "no origins", yaml: "listen: ['127.0.0.1:0']\n", want: "origins: at least one origin"},
		{name: "origin without port", yaml: "origins: [origin.example]\n", want: `origins: "origin.example" is not host:port`},
		{name: "unitless duration", yaml: "origins: [o:1]\nconnect_timeout: 3\n", want: "connect_timeout"},
		{name: "bad duration", yaml: "origins: [o:1]\ndrain_timeout: soon\n", want: `bad duration "soon"`},
		{name: "bad proxy_protocol", yaml: "origins: [o:1]\nproxy_protocol: v3\n", want: `proxy_protocol: "v3" is not v2, v1 or off`},
		{name: "zero max_conns", yaml: "origins: [o:1]\nmax_conns: 0\n", want: "max_conns: 0 must be positive"},
		{name: "max_conns not a number", yaml: "origins: [o:1]\nmax_conns: many\n", want: "max_conns"},
		{name: "bad log format", yaml: "origins: [o:1]\nlog:\n  format: xml\n", want: `log.format: "xml"`},
		{name: "bad metrics", yaml: "origins: [o:1]\nmetrics: \"9101\"\n", want: `metrics: "9101" is not host:port`},
		{name: "metrics a number", yaml: "origins: [o:1]\nmetrics: 9101\n", want: `metrics: 9101 is not a string (quote it)`},
		{name: "boolean duration", yaml: "origins: [o:1]\nconnect_timeout: true\n", want: "connect_timeout: true is not a duration"},
		{name: "fractional max_conns", yaml: "origins: [o:1]\nmax_conns: 1.9\n", want: "max_conns: 1.9 is not a whole number"},
		{name: "origin is the edge", yaml: "listen: ['127.0.0.1:6360']\norigins: ['localhost:6360']\n", want: `origins: "localhost:6360" is the edge's own listen address`},
		{name: "source not an IP", yaml: "origins: [o:1]\nsource: edge-a.example\n", want: `source: "edge-a.example" is not an IP address`},
		{name: "source not here", yaml: "origins: [o:1]\nsource: 192.0.2.1\n", want: `source: "192.0.2.1" is not an address of this host: bind: cannot assign requested address`},
		{name: "source with port", args: []string{"--origins", "o:1", "--source", "127.0.0.2:0"}, want: `source: "127.0.0.2:0" is not an IP address`},
		{name: "broken yaml", yaml: "origins: [o:1\n", want: "config "},
		{name: "missing file", args: []string{"--config", "does-not-exist.yaml"}, want: "does-not-exist.yaml"},
		{name: "bad env", env: []string{"EDGEFLEET_ORIGINS=o:1", "EDGEFLEET_KEEPALIVE=-1s"}, want: "keepalive"},
		{name: "bad flag value", args: []string{"--origins", "o:1", "--proxy-protocol", "v9"}, want: `proxy_protocol: "v9"`},
		{name: "unknown flag", args: []string{"--origin", "o:1"}, want: "unknown flag: --origin"},
		{name: "check of a bad file", yaml: "origins: [o:1]\nlisten_on: [':1']\n", args: []string{"--check"}, want: `unknown key "listen_on"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.yaml != "" {
				path := testbed.WriteFile(t, t.TempDir(), "edge.yaml", tc.yaml)
				args = append([]string{"--config", path}, args...)
			}
			cmd := exec.Command(edgeBin(t), args...)
			cmd.Env = append(os.Environ(), tc.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			cmd.Dir = t.TempDir()
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				t.Fatal("edge kept running with a bad configuration")
			}
			if code := cmd.ProcessState.ExitCode(); code != 2 {
				t.Fatalf("exit status %d, want 2; stderr %q", code, stderr.String())
			}
			out := stderr.String()
			if strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "edge: ") || !strings.Contains(out, tc.want) {
				t.Fatalf("stderr %q, want one line containing %q", out, tc.want)
			}
		})
	}
}

// TestCheck: --check on a good file prints one line and exits 0 without
// listening (the port it names is still free afterwards).
func TestCheck(t *testing.T) {
	addr := testbed.FreeAddr(t, "127.0.0.1")
	path := testbed.WriteFile(t, t.TempDir(), "edge.yaml", "name: e1\nlisten: ['"+addr+"']\norigins: ['192.0.2.2:8636']\nmetrics: ''\n")
	out, err := exec.Command(edgeBin(t), "--config", path, "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("edge --check: %v\n%s", err, out)
	}
	if want := "edge: configuration ok (name e1, origins o1)\n"; string(out) != want {
		t.Fatalf("output %q, want %q", out, want)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s is taken after --check: %v", addr, err)
	}
	ln.Close()
}

// edgeProc is a running edge binary with its stderr at hand.
type edgeProc struct {
	*testbed.Proc
	addr, metrics, config string
}

func startEdgeBin(t *testing.T, yaml string) *edgeProc {
	t.Helper()
	addr := testbed.FreeAddr(t, "127.0.0.1")
	metrics := testbed.FreeAddr(t, "127.0.0.1")
	path := testbed.WriteFile(t, t.TempDir(), "edge.yaml",
		"name: edge-bin\nlisten: ['"+addr+"']\nmetrics: "+metrics+"\nlog:\n  format: json\n"+yaml)
	p := testbed.Start(t, edgeBin(t), "--config", path)
	testbed.WaitTCP(t, addr, 10*time.Second)
	return &edgeProc{Proc: p, addr: addr, metrics: metrics, config: path}
}

// exited waits for the process to end and returns its exit status.
func (p *edgeProc) exited(t *testing.T, within time.Duration) int {
	t.Helper()
	done := make(chan struct{})
	go func() { p.Cmd.Wait(); close(done) }()
	select {
	case <-done:
		return p.Cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("edge still running after %v", within)
		return -1
	}
}

// echoOrigin is a Go origin that reads the PROXY header, writes tag and
// echoes the rest.
func echoOrigin(t *testing.T, tag string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testbed.ServeConns(t, ln, func(c net.Conn) {
		r := bufio.NewReader(c)
		if _, err := proxyproto.Read(r); err != nil {
			return
		}
		io.WriteString(c, tag)
		io.Copy(c, r)
		c.(*net.TCPConn).CloseWrite()
	})
	return ln.Addr().String()
}

// dialTag connects through the edge and reads the origin's tag.
func dialTag(t *testing.T, addr string) (net.Conn, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read tag: %v", err)
	}
	return c, string(b)
}

// TestDrainOnSIGTERM: after SIGTERM the edge refuses new connections at
// once, lets an open one finish, then exits 0; one that does not finish
// is closed at drain_timeout. The edge runs two loops (GOMAXPROCS 4), so
// two sockets listen on its address (SO_REUSEPORT shards); both are
// closed, and then every connect is refused, whichever shard its hash
// would pick (100 tries from new ports).
func TestDrainOnSIGTERM(t *testing.T) {
	t.Setenv("GOMAXPROCS", "4") // for the edge, which inherits it
	for _, tc := range []struct {
		name   string
		drain  string
		finish bool
	}{
		{"open connection finishes", "30s", true},
		{"drain_timeout closes it", "300ms", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			origin := echoOrigin(t, "a")
			e := startEdgeBin(t, "origins: ['"+origin+"']\ndrain_timeout: "+tc.drain+"\n")
			c, _ := dialTag(t, e.addr)
			defer c.Close()
			if n := listening(t, e.addr); n != 2 {
				t.Fatalf("%d sockets listen on %s, want 2 (one per loop)", n, e.addr)
			}
			e.Cmd.Process.Signal(syscall.SIGTERM)
			deadline := time.Now().Add(5 * time.Second)
			for {
				probe, err := net.Dial("tcp", e.addr)
				if err != nil {
					break
				}
				probe.Close()
				if time.Now().After(deadline) {
					t.Fatal("still accepting after SIGTERM")
				}
				time.Sleep(10 * time.Millisecond)
			}
			// The loops close their shards one after the other, each in
			// its own goroutine: wait for the last, then no connect gets in.
			for n := listening(t, e.addr); n != 0; n = listening(t, e.addr) {
				if time.Now().After(deadline) {
					t.Fatalf("%d sockets still listen on %s 5 s after SIGTERM", n, e.addr)
				}
				time.Sleep(10 * time.Millisecond)
			}
			for i := range 100 {
				if probe, err := net.Dial("tcp", e.addr); err == nil {
					probe.Close()
					t.Fatalf("connect %d after SIGTERM was accepted", i)
				}
			}
			if tc.finish {
				io.WriteString(c, "still here")
				b := make([]byte, 10)
				if _, err := io.ReadFull(c, b); err != nil || string(b) != "still here" {
					t.Fatalf("during drain: %q, %v", b, err)
				}
				c.(*net.TCPConn).CloseWrite()
				io.ReadAll(c)
			}
			if code := e.exited(t, 15*time.Second); code != 0 {
				t.Fatalf("exit status %d after SIGTERM", code)
			}
			want := `"reason":"eof"`
			if !tc.finish {
				want = `"reason":"drain"`
				if _, err := c.Read(make([]byte, 1)); err == nil {
					t.Fatal("connection still open after drain_timeout")
				}
			}
			if !strings.Contains(e.Output(), want) {
				t.Fatalf("no %s in the log:\n%s", want, e.Output())
			}
		})
	}
}

// TestSIGHUPReloadsOrigins rewrites the file's origins and sends SIGHUP:
// new connections go to the new origin, open ones stay where they are.
func TestSIGHUPReloadsOrigins(t *testing.T) {
	a, b := echoOrigin(t, "a"), echoOrigin(t, "b")
	e := startEdgeBin(t, "origins: ['"+a+"']\n")
	old, tag := dialTag(t, e.addr)
	defer old.Close()
	if tag != "a" {
		t.Fatalf("before reload: origin %q", tag)
	}
	cfg, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, []byte(strings.Replace(string(cfg), a, b, 1)), 0o600)
	e.Cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, tag := dialTag(t, e.addr)
		c.Close()
		if tag == "b" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still origin %q after SIGHUP; log:\n%s", tag, e.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	io.WriteString(old, "x") // the open connection is untouched
	if b := make([]byte, 1); func() error { _, err := io.ReadFull(old, b); return err }() != nil || b[0] != 'x' {
		t.Fatal("open connection broken by the reload")
	}

	// Keys other than origins need a restart: the reload says which.
	cfg, _ = os.ReadFile(e.config)
	os.WriteFile(e.config, append(cfg, "max_conns: 7\nconnect_timeout: 1s\n"...), 0o600)
	e.Cmd.Process.Signal(syscall.SIGHUP)
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(e.Output(), `"msg":"reload: changed keys need a restart, still running with their old values","keys":["connect_timeout","max_conns"]`) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning naming connect_timeout and max_conns:\n%s", e.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A broken file keeps the running configuration.
	os.WriteFile(e.config, []byte("origins: [\n"), 0o600)
	e.Cmd.Process.Signal(syscall.SIGHUP)
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(e.Output(), "reload failed") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload failure logged:\n%s", e.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c, tag := dialTag(t, e.addr); tag != "b" {
		t.Fatalf("after a bad reload: origin %q", tag)
	} else {
		c.Close()
	}
}

// TestMetricsEndpoint scrapes /metrics of the running binary: every family
// deploy/monitoring lists for the edge (the names its alerts and dashboard
// use), with its type, and the process collector.
func TestMetricsEndpoint(t *testing.T) {
	e := startEdgeBin(t, "origins: ['"+echoOrigin(t, "a")+"']\n")
	c, _ := dialTag(t, e.addr)
	c.Close()
	body := testbed.Scrape(t, e.metrics)
	if !strings.Contains(body, "\nprocess_open_fds ") {
		t.Errorf("/metrics lacks process_open_fds")
	}
	for name, typ := range monitoring.Exported["edge"] {
		if !strings.Contains(body, "\n# TYPE "+name+" "+typ+"\n"+name) {
			t.Errorf("/metrics lacks %s %s with a sample", typ, name)
		}
	}
}

func TestVersion(t *testing.T) {
	out, err := exec.Command(edgeBin(t), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "edge version") {
		t.Fatalf("--version: %q, %v", out, err)
	}
}

// TestSurvivesFDExhaustion: the edge under a low
// RLIMIT_NOFILE, flooded until it runs out of descriptors ("too many open
// files": at accept, which backs off and retries, or at the origin
// socket, which refuses that client as local-resources — which one comes
// first depends on how many descriptors are left), relays again once the
// flood is gone. internal/evloop's TestAcceptBackOff covers the back-off
// itself.
func TestSurvivesFDExhaustion(t *testing.T) {
	origin := echoOrigin(t, "A")
	addr := testbed.FreeAddr(t, "127.0.0.1")
	path := testbed.WriteFile(t, t.TempDir(), "edge.yaml",
		// max_conns above what 40 descriptors allow (the default fits
		// them): the flood must run the edge out.
		"name: edge-bin\nlisten: ['"+addr+"']\nmetrics: ''\nlog:\n  format: json\nmax_conns: 100000\norigins: ['"+origin+"']\n")
	p := testbed.StartNofile(t, 40, edgeBin(t), "--config", path)
	testbed.WaitTCP(t, addr, 10*time.Second)
	closeAll := testbed.Flood(t, addr, 60)
	testbed.WaitOutput(t, p, 20*time.Second, "too many open files")
	closeAll()
	if tag, err := tagWithin(addr, 30*time.Second); tag != "A" {
		t.Fatalf("the edge does not relay again after the flood: tag %q, %v", tag, err)
	}
	if p.Cmd.ProcessState != nil {
		t.Fatalf("the edge exited: %v", p.Cmd.ProcessState)
	}
}

// TestInvalidConfigs loads each testdata/invalid-*.yml (CoreDNS and
// blackbox_exporter style): the error must be exactly the one in
// testdata/invalid.golden for that file (regenerate with -update). Wrong
// types are errors naming the key, never silent conversions
// (connect_timeout: true is no duration, max_conns: 1.9 no count).
func TestInvalidConfigs(t *testing.T) {
	testbed.InvalidConfigs(t, *update, func(path string) error { _, err := load(nil, path); return err })
}

var update = flag.Bool("update", false, "rewrite testdata/invalid.golden")

// TestTLSGateModeWords: `mode: on` and `mode: off` load as the words (not
// YAML 1.1 booleans), and the gate follows server_names under auto.
func TestTLSGateModeWords(t *testing.T) {
	for _, tc := range []struct {
		yaml, mode string
		on         bool
	}{
		{"tls_gate: {mode: on}", "on", true},
		{"tls_gate: {mode: off, server_names: [ldap.example.com]}", "off", false},
		{"tls_gate: {server_names: [ldap.example.com]}", "auto", true},
		{"name: e", "auto", false},
	} {
		cfg, err := load(nil, testbed.WriteFile(t, t.TempDir(), "edge.yaml", "origins: [\"192.0.2.1:8636\"]\n"+tc.yaml+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.yaml, err)
		}
		if cfg.TLSGate.Mode != tc.mode || cfg.TLSGate.On() != tc.on || cfg.TLSGate.HelloTimeout != 5*time.Second {
			t.Errorf("%s: loads as %+v (on %v)", tc.yaml, cfg.TLSGate, cfg.TLSGate.On())
		}
	}
}

// listening counts the sockets listening on addr (an IPv4 address), from
// /proc/net/tcp.
func listening(t *testing.T, addr string) int {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	a := ap.Addr().As4()
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], ap.Port())
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[1] == want && f[3] == "0A" { // TCP_LISTEN
			n++
		}
	}
	return n
}
