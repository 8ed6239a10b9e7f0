package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	proxyproto "github.com/pires/go-proxyproto"
)

// TestFrontBinary runs the origin binary with the core disabled and an
// inner service that finds its peers over the peers API, out of process.
func TestFrontBinary(t *testing.T) {
	bin := buildOrigin(t)
	front := testbed.FreeAddr(t, "127.0.0.1")
	peersAPI := testbed.FreeAddr(t, "127.0.0.1")
	metrics := testbed.FreeAddr(t, "127.0.0.1")

	// The inner service asks GET /peers/{its client's port} and sends the
	// answer back, then closes.
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testbed.ServeConns(t, inner, func(c net.Conn) {
		c.Read(make([]byte, 512)) // the client speaks first
		port := c.RemoteAddr().(*net.TCPAddr).Port
		resp, err := http.Get("http://" + peersAPI + "/peers/" + strconv.Itoa(port))
		if err != nil {
			fmt.Fprintf(c, "error: %v", err)
			return
		}
		io.Copy(c, resp.Body)
		resp.Body.Close()
	})

	dir := t.TempDir()
	cfg := testbed.WriteFile(t, dir, "origin.yaml", fmt.Sprintf(`front:
  listen: [%q]
  inner: %q
  trusted_edges: [127.0.0.2]
  header_timeout: 2s
peers_api: %q
metrics: %q
log:
  format: json
core:
  enabled: false
`, front, inner.Addr(), peersAPI, metrics))
	p := testbed.Start(t, bin, "--config", cfg)
	testbed.WaitTCP(t, front, 10*time.Second)
	testbed.WaitTCP(t, peersAPI, 10*time.Second)

	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := proxyproto.HeaderProxyFromAddrs(2, &net.TCPAddr{IP: net.ParseIP("192.0.2.44"), Port: 33000}, &net.TCPAddr{IP: net.ParseIP("198.51.100.1"), Port: 636})
	h.SetTLVs([]proxyproto.TLV{{Type: proxyproto.PP2_TYPE_UNIQUE_ID, Value: []byte("conn-77")}, {Type: 0xE0, Value: []byte("edge-7")}})
	hdr, _ := h.Format()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(append(hdr, "hello"...))
	body, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	var peer map[string]any
	if err := json.Unmarshal(body, &peer); err != nil {
		t.Fatalf("inner's answer %q: %v", body, err)
	}
	if peer["claimed"] != "192.0.2.44:33000" || peer["measured"] != c.LocalAddr().String() ||
		peer["edge"] != "edge-7" || peer["id"] != "conn-77" || peer["header"] != "v2" {
		t.Fatalf("GET /peers/{port} = %v", peer)
	}

	text := testbed.Scrape(t, metrics)
	for _, name := range []string{
		`edgefleet_origin_connections_total{header="v2",result="ok"} 1`,
		"edgefleet_origin_spoofed_headers_total 0",
		"edgefleet_origin_header_timeouts_total 0",
		"edgefleet_origin_connections_active",
		"edgefleet_origin_peer_table_entries",
	} {
		if !strings.Contains(text, name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}

	p.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.Cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.Output())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10s after SIGTERM\n%s", p.Output())
	}
	if !strings.Contains(p.Output(), `"msg":"connection closed"`) || !strings.Contains(p.Output(), `"claimed":"192.0.2.44:33000"`) {
		t.Errorf("no close line with claimed address in:\n%s", p.Output())
	}
}

// TestFrontBadConfig: a bad front: section exits 2 with one line naming
// the key.
func TestFrontBadConfig(t *testing.T) {
	bin := buildOrigin(t)
	for _, tc := range []struct {
		name, yaml string
		env        []string
		want       string
	}{
		{"unknown key", "front:\n  listen_on: [':1']\n", nil, `unknown key "front.listen_on"`},
		{"bad cidr", "front:\n  trusted_edges: [10.0.0.0/40]\n", nil, `front.trusted_edges: "10.0.0.0/40" is not a CIDR or an IP address`},
		{"bad untrusted", "front:\n  untrusted: drop\n", nil, `front.untrusted: "drop" is not passthrough or reject`},
		{"reject without edges", "front:\n  untrusted: reject\n", nil, "front.untrusted: reject with an empty trusted_edges"},
		{"unitless timeout", "front:\n  header_timeout: 5\n", nil, "header_timeout"},
		{"bad inner from env", "", []string{"EDGEFLEET_FRONT_INNER=nowhere"}, `front.inner: "nowhere" is not host:port`},
		{"listen in use", "", nil, "front.listen"},
		{"fractional max_conns", "front:\n  max_conns: 1.9\n", nil, "config: front.max_conns: 1.9 is not a whole number"},
		{"boolean timeout", "front:\n  header_timeout: true\n", nil, "config: front.header_timeout: true is not a duration"},
		{"zero max_conns", "front:\n  max_conns: 0\n", nil, "front.max_conns: 0 must be positive"},
		{"unknown section", "fronts: {}\n", nil, `unknown key "fronts"`},
		{"inner is the front", "front:\n  listen: ['127.0.0.1:8636']\n  inner: localhost:8636\n", nil, `front.inner: "localhost:8636" is the front's own listen address "127.0.0.1:8636"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			yaml := tc.yaml
			if tc.name == "listen in use" {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				yaml = fmt.Sprintf("front:\n  listen: [%q]\n", ln.Addr())
			}
			yaml += "peers_api: \"\"\nmetrics: \"\"\ncore:\n  enabled: false\n"
			cfg := testbed.WriteFile(t, dir, "origin.yaml", yaml)
			cmd := exec.Command(bin, "--config", cfg)
			cmd.Env = append(os.Environ(), tc.env...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit: %v, want 2\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("output %q, want one line containing %q", out, tc.want)
			}
		})
	}
}

// TestCheckedBeforeListening: a bad core: value ends
// the origin with exit 2 before the front ever listens (it used to print
// "front listening" and accept for a moment).
func TestCheckedBeforeListening(t *testing.T) {
	bin := buildOrigin(t)
	front := testbed.FreeAddr(t, "127.0.0.1")
	cfg := testbed.WriteFile(t, t.TempDir(), "origin.yaml", fmt.Sprintf(`front:
  listen: [%q]
peers_api: ""
metrics: ""
core:
  proxy_mode: 0
  default_server: 127.0.0.1:1
  tls:
    mode: tls
`, front))
	if got := refusedBeforeListening(t, bin, cfg, front); !strings.Contains(got, "core.tls.mode tls needs core.tls.cert and core.tls.key") {
		t.Fatalf("output %q, want only the one line about core.tls", got)
	}
}

// TestInnerNotCoreWarns: with the core enabled, a
// front.inner other than core.listen sends connections past the core: the
// origin says so at start.
func TestInnerNotCoreWarns(t *testing.T) {
	bin := buildOrigin(t)
	front := testbed.FreeAddr(t, "127.0.0.1")
	coreAddr := testbed.FreeAddr(t, "127.0.0.1")
	other := testbed.FreeAddr(t, "127.0.0.1")
	cfg := originYAML(t, front, other, "", nil, []string{fmt.Sprintf("listen: %q", coreAddr), "proxy_mode: 0", "default_server: 127.0.0.1:1"})
	p := testbed.Start(t, bin, "--config", cfg)
	testbed.WaitTCP(t, coreAddr, 10*time.Second)
	testbed.WaitOutput(t, p, 10*time.Second, `"msg":"front.inner is not core.listen: connections go past the core","inner":"`+other+`","core_listen":"`+coreAddr+`"`)
	if strings.Count(p.Output(), "front.inner is not core.listen") != 1 {
		t.Fatalf("want one warning:\n%s", p.Output())
	}
}

// TestSIGHUPNamesRestartKeys: SIGHUP re-reads the file
// and names the changed keys, which all need a restart; the origin keeps
// running (the signal's default action used to end it).
func TestSIGHUPNamesRestartKeys(t *testing.T) {
	bin := buildOrigin(t)
	front := testbed.FreeAddr(t, "127.0.0.1")
	yaml := fmt.Sprintf("front:\n  listen: [%q]\npeers_api: \"\"\nmetrics: \"\"\nlog:\n  format: json\ncore:\n  enabled: false\n", front)
	cfg := testbed.WriteFile(t, t.TempDir(), "origin.yaml", yaml)
	p := testbed.Start(t, bin, "--config", cfg)
	testbed.WaitTCP(t, front, 10*time.Second)
	os.WriteFile(cfg, []byte(strings.Replace(yaml, "front:\n", "front:\n  max_conns: 7\n  header_timeout: 1s\n", 1)), 0o600)
	p.Cmd.Process.Signal(syscall.SIGHUP)
	testbed.WaitOutput(t, p, 10*time.Second,
		`"msg":"reload: changed keys need a restart, still running with their old values","keys":["front.header_timeout","front.max_conns"]`)
	if p.Cmd.ProcessState != nil {
		t.Fatalf("the origin exited on SIGHUP: %v", p.Cmd.ProcessState)
	}
	testbed.WaitTCP(t, front, 10*time.Second)
}

// TestSIGHUPReloadsTrustedEdges: a new edge (127.0.0.2) outside
// front.trusted_edges has its PROXY header refused as a spoof; after the
// file lists it and SIGHUP, its header is honoured — while a connection
// from the edge trusted before (127.0.0.3) stays open through the reload
// and keeps relaying. A list the check refuses (link-local) keeps the
// running one.
func TestSIGHUPReloadsTrustedEdges(t *testing.T) {
	bin := buildOrigin(t)
	front := testbed.FreeAddr(t, "127.0.0.1")
	inner, peers := testbed.EchoTCP(t), testbed.FreeAddr(t, "127.0.0.1")
	yaml := func(edges string) []byte {
		return fmt.Appendf(nil, "front:\n  listen: [%q]\n  inner: %q\n  trusted_edges: [%s]\npeers_api: %q\nmetrics: \"\"\nlog:\n  format: json\ncore:\n  enabled: false\n",
			front, inner, edges, peers)
	}
	cfg := testbed.WriteFile(t, t.TempDir(), "origin.yaml", string(yaml("127.0.0.3")))
	p := testbed.Start(t, bin, "--config", cfg)
	testbed.WaitTCP(t, front, 10*time.Second)
	header := "PROXY TCP4 198.51.100.7 203.0.113.1 50312 636\r\n"
	dial := func(ip string) net.Conn { return testbed.DialFrom(t, ip, front) }
	held := dial("127.0.0.3")
	if !echoes(t, held, header, "held before") {
		t.Fatal("the trusted edge's connection does not relay")
	}
	if c := dial("127.0.0.2"); echoes(t, c, header, "x") {
		t.Fatal("127.0.0.2's header was honoured before it was trusted")
	}

	os.WriteFile(cfg, yaml(`"127.0.0.3", "127.0.0.2"`), 0o600)
	p.Cmd.Process.Signal(syscall.SIGHUP)
	testbed.WaitOutput(t, p, 10*time.Second, `"msg":"trusted_edges reloaded","trusted_edges":["127.0.0.3","127.0.0.2"],"was":["127.0.0.3"]`)
	if c := dial("127.0.0.2"); !echoes(t, c, header, "after") {
		t.Errorf("127.0.0.2's header still refused after the reload:\n%s", p.Output())
	}
	if !echoes(t, held, "", "held after") {
		t.Error("the connection open across the reload was dropped")
	}
	if got := trustedEdges(t, peers); got != `{"trusted_edges":["127.0.0.3","127.0.0.2"]}` {
		t.Errorf("GET /trusted_edges after the reload: %s", got)
	}
	if strings.Contains(p.Output(), "need a restart") {
		t.Errorf("the reload asked for a restart:\n%s", p.Output())
	}

	os.WriteFile(cfg, yaml(`"fe80::/10"`), 0o600)
	p.Cmd.Process.Signal(syscall.SIGHUP)
	testbed.WaitOutput(t, p, 10*time.Second, `"msg":"reload failed, keeping the running configuration","err":"front.trusted_edges: \"fe80::/10\" is link-local`)
	if c := dial("127.0.0.2"); !echoes(t, c, header, "still") || trustedEdges(t, peers) != `{"trusted_edges":["127.0.0.3","127.0.0.2"]}` {
		t.Error("a refused reload changed the running trusted_edges")
	}
}

// TestSIGHUPReloadsPerEdge: front.per_edge is applied on SIGHUP. Under
// rate 1/h with a burst of 2 the trusted edge's third connection is
// refused (reason rate); after the file sets a cap of 3 and no rate, and
// SIGHUP, the two connections held through the reload still count and
// still relay, one more gets in and the next is refused (reason conns);
// a file the check refuses (a negative cap, or a good cap beside a bad
// trusted_edges) keeps the running limits and leaves nothing behind: the
// good cap, given again with the edges fixed, is applied. Nothing asks
// for a restart.
func TestSIGHUPReloadsPerEdge(t *testing.T) {
	bin := buildOrigin(t)
	front, metrics := testbed.FreeAddr(t, "127.0.0.1"), testbed.FreeAddr(t, "127.0.0.1")
	inner := testbed.EchoTCP(t)
	yaml := func(perEdge string, edges ...string) []byte {
		if edges == nil {
			edges = []string{"127.0.0.2"}
		}
		return fmt.Appendf(nil, "front:\n  listen: [%q]\n  inner: %q\n  trusted_edges: [%s]\n  per_edge: %s\npeers_api: \"\"\nmetrics: %q\nlog:\n  format: json\ncore:\n  enabled: false\n",
			front, inner, strings.Join(edges, ", "), perEdge, metrics)
	}
	cfg := testbed.WriteFile(t, t.TempDir(), "origin.yaml", string(yaml(`{conns: 0, rate: "1/h", burst: 2}`)))
	p := testbed.Start(t, bin, "--config", cfg)
	testbed.WaitTCP(t, front, 10*time.Second)
	header := "PROXY TCP4 198.51.100.7 203.0.113.1 50312 636\r\n"
	refused := func(reason string) string {
		return `edgefleet_front_edge_refused_total{edge="127.0.0.2",reason="` + reason + `"}`
	}

	var held []net.Conn
	for i := range 2 {
		c := testbed.DialFrom(t, "127.0.0.2", front)
		if !echoes(t, c, header, "held") {
			t.Fatalf("connection %d of the burst of 2 refused:\n%s", i+1, p.Output())
		}
		held = append(held, c)
	}
	if echoes(t, testbed.DialFrom(t, "127.0.0.2", front), header, "x") {
		t.Fatal("a third connection got in under rate 1/h, burst 2")
	}
	testbed.WaitOutput(t, p, 10*time.Second, `"share":"127.0.0.2","reason":"rate","limit":"1/h"`)

	os.WriteFile(cfg, yaml(`{conns: 3, rate: "0", burst: 2}`), 0o600)
	p.Cmd.Process.Signal(syscall.SIGHUP)
	testbed.WaitOutput(t, p, 10*time.Second, `"msg":"per_edge reloaded","conns":3,"rate":"0","burst":2,"was":"conns 0, rate 1/h, burst 2"`)
	if c := testbed.DialFrom(t, "127.0.0.2", front); !echoes(t, c, header, "third") {
		t.Fatalf("no connection got in after the reload lifted the rate:\n%s", p.Output())
	} else {
		held = append(held, c)
	}
	if echoes(t, testbed.DialFrom(t, "127.0.0.2", front), header, "x") {
		t.Fatal("a fourth connection got in under conns 3 (the two held through the reload did not count)")
	}
	for i, c := range held[:2] {
		if !echoes(t, c, "", "still") {
			t.Errorf("connection %d held through the reload was dropped", i+1)
		}
	}

	os.WriteFile(cfg, yaml(`{conns: -1, rate: "0", burst: 2}`), 0o600)
	p.Cmd.Process.Signal(syscall.SIGHUP)
	testbed.WaitOutput(t, p, 10*time.Second, `"msg":"reload failed, keeping the running configuration","err":"front.per_edge.conns: -1 is negative`)
	if echoes(t, testbed.DialFrom(t, "127.0.0.2", front), header, "x") {
		t.Error("a refused reload lifted the running cap of 3")
	}
	body := testbed.Scrape(t, metrics)
	for _, want := range []string{refused("rate") + " 1", refused("conns") + " 2"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
	if strings.Contains(p.Output(), "need a restart") {
		t.Errorf("the reload asked for a restart:\n%s", p.Output())
	}

	// A file that raises the cap and lists a link-local edge is refused
	// whole: the cap stays 3, and the next file that raises it (the edge
	// list fixed) is applied — the refused one left nothing behind that
	// would hide the change.
	os.WriteFile(cfg, yaml(`{conns: 4, rate: "0", burst: 2}`, `"fe80::/10"`), 0o600)
	p.Cmd.Process.Signal(syscall.SIGHUP)
	testbed.WaitOutput(t, p, 10*time.Second, `"msg":"reload failed, keeping the running configuration","err":"front.trusted_edges: \"fe80::/10\" is link-local`)
	if strings.Contains(p.Output(), `"conns":4`) {
		t.Errorf("a refused reload logged per_edge as reloaded:\n%s", p.Output())
	}
	if echoes(t, testbed.DialFrom(t, "127.0.0.2", front), header, "x") {
		t.Error("a refused reload raised the running cap of 3")
	}
	os.WriteFile(cfg, yaml(`{conns: 4, rate: "0", burst: 2}`), 0o600)
	p.Cmd.Process.Signal(syscall.SIGHUP)
	testbed.WaitOutput(t, p, 10*time.Second, `"msg":"per_edge reloaded","conns":4,"rate":"0","burst":2,"was":"conns 3, rate 0, burst 2"`)
	if !echoes(t, testbed.DialFrom(t, "127.0.0.2", front), header, "fourth") {
		t.Errorf("no fourth connection under conns 4:\n%s", p.Output())
	}
}

// echoes sends prefix and msg on c and reports whether msg came back
// (false on a connection the front refused: it closes it).
func echoes(t *testing.T, c net.Conn, prefix, msg string) bool {
	t.Helper()
	if _, err := io.WriteString(c, prefix+msg); err != nil {
		return false
	}
	b := make([]byte, len(msg))
	_, err := io.ReadFull(c, b)
	return err == nil && string(b) == msg
}

// trustedEdges is the body of GET /trusted_edges on the peers API.
func trustedEdges(t *testing.T, peers string) string {
	t.Helper()
	resp, err := http.Get("http://" + peers + "/trusted_edges")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}
