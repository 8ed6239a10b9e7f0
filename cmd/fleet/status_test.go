package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
	"github.com/edgefleet/edgefleet/origin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// TestStatusExitCodes runs fleet status against our edge, the embedded DNS
// server and nsupdate: a healthy fleet exits 0; an address a stranger
// published (nsupdate) is a row of its own, state unknown, and exit 1; an
// edge whose IPv6 address is a black hole (it accepts and never answers)
// is failed though its IPv4 address works, and exit 1; --output json
// carries the same rows.
func TestStatusExitCodes(t *testing.T) {
	testbed.Need(t, "slapd", "nsupdate")
	o, p := oneEdge(t)
	dir := t.TempDir()
	server := lowAddr(t)
	testbed.WriteFile(t, dir, "fleet.key", testbed.WrongKeySecret+"\n")
	yaml := func(edge string) string {
		return testbed.WriteFile(t, dir, "fleet.yaml", fmt.Sprintf(`name: ldap.example.test
zone: example.test
ttl: 1
dns: {server: "%s", tsig: {name: fleet-key, algorithm: hmac-sha256, secret_file: fleet.key}}
probe: {ca: %s, cert: %s, key: %s, server_name: %s, port: %s}
edges:
  - %s
`, server, o.PKI.Path("ca.pem"), o.PKI.Path("agent.pem"), o.PKI.Path("agent.key"), testbed.ServerName, p, edge))
	}
	inv := yaml("{name: e1, ipv4: 127.0.0.2}")
	testbed.Start(t, fleetBin(t), "--config", inv, "dns", "serve")
	waitDNS(t, server)
	if r := fleetRun(t, nil, "--config", inv, "apply", "--no-firewall", "--allow-loopback"); r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := fleetRun(t, nil, "--config", inv, "status", "--no-firewall")
	if r.code != 0 || !strings.Contains(r.stdout, "e1    127.0.0.2  yes     -") {
		t.Fatalf("healthy status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	if out, ok := nsupdate(t, server, "update add ldap.example.test 60 A 127.0.0.9", "-y", "hmac-sha256:fleet-key:"+testbed.WrongKeySecret); !ok {
		t.Fatalf("nsupdate: %s", out)
	}
	r = fleetRun(t, nil, "--config", inv, "status", "--no-firewall")
	t.Logf("status with a stranger:\n%s%s", r.stdout, r.stderr)
	if !strings.Contains(r.stdout, "\n-     127.0.0.9  yes") || !strings.HasSuffix(strings.TrimSpace(r.stdout), "unknown") {
		t.Fatalf("no unknown row for 127.0.0.9:\n%s", r.stdout)
	}
	oneLineFailure(t, "stranger", r, 1, "127.0.0.9 is live in DNS but no edge of fleet.yaml has it")
	r = fleetRun(t, nil, "--config", inv, "status", "--no-firewall", "--output", "json")
	var js struct {
		Edges []struct {
			Edge, Address, State string
			InDNS                string `json:"in_dns"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || r.code != 1 || len(js.Edges) != 2 ||
		js.Edges[1].Edge != "" || js.Edges[1].Address != "127.0.0.9" || js.Edges[1].State != "unknown" || js.Edges[1].InDNS != "yes" {
		t.Fatalf("status --output json: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	if out, ok := nsupdate(t, server, "update delete ldap.example.test A 127.0.0.9", "-y", "hmac-sha256:fleet-key:"+testbed.WrongKeySecret); !ok {
		t.Fatalf("nsupdate: %s", out)
	}

	// Accepts and never answers: the TLS handshake runs into the budget.
	hole, err := net.Listen("tcp", "[::1]:"+p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hole.Close() })
	inv = yaml(`{name: e1, ipv4: 127.0.0.2, ipv6: "::1"}`)
	r = fleetRun(t, nil, "--config", inv, "status", "--no-firewall")
	t.Logf("status with an IPv6 black hole:\n%s%s", r.stdout, r.stderr)
	if !strings.Contains(r.stdout, "[::1]:"+p) || !strings.HasSuffix(strings.TrimSpace(r.stdout), "failed") {
		t.Fatalf("the IPv6 black hole is not failed:\n%s", r.stdout)
	}
	oneLineFailure(t, "IPv6 black hole", r, 1, "e1 failed: tls handshake [::1]:"+p)
}

// unreadable is a firewall whose rules cannot be read.
type unreadable struct{}

var errUnreadable = errors.New("iptables -S EDGEFLEET: exit status 4: Permission denied (you must be root)")

func (unreadable) Diff([]deploy.Edge) ([]string, error)      { return nil, errUnreadable }
func (unreadable) Allow([]deploy.Edge) (func() error, error) { return nil, errUnreadable }
func (unreadable) Allowed() (map[netip.Addr]bool, error)     { return nil, errUnreadable }
func (unreadable) Sources() (map[netip.Addr]string, error)   { return nil, errUnreadable }

// TestStatusFirewallUnreadable: rows whose firewall column is "?" make
// status exit 1 with the reason the rules could not be read.
func TestStatusFirewallUnreadable(t *testing.T) {
	cmd := &cobra.Command{}
	cmd.SetOut(io.Discard)
	rows := []deploy.StatusRow{{Edge: "e1", Address: "192.0.2.1", InDNS: "yes", InFirewall: "?", Handshake: "1.0 ms", Active: "-", State: deploy.StateActive}}
	err := printStatus(cmd, "text", rows, unreadable{}, nil)
	var ee *cli.ExitError
	if !errors.As(err, &ee) || ee.Code != 1 || err.Error() != "the firewall rules cannot be read: iptables -S EDGEFLEET: exit status 4: Permission denied (you must be root)" {
		t.Fatalf("printStatus: %v", err)
	}
}

// TestStatusRefusedFromOrigin runs fleet status with origin.metrics
// against three endpoints: the metrics of a real front, served by the
// handler the origin serves (cli.Metrics), refusing 30 more connections
// from e1's address before every read; the real origin binary's /metrics (it has refused
// nothing: 0); and a port nobody listens on ("?" and one warning line,
// exit status unchanged). Without the key the column is "-".
func TestStatusRefusedFromOrigin(t *testing.T) {
	testbed.Need(t, "slapd", "nsupdate")
	o, p := oneEdge(t)
	dir := t.TempDir()
	server := lowAddr(t)
	testbed.WriteFile(t, dir, "fleet.key", testbed.WrongKeySecret+"\n")
	yaml := func(originKeys string) string {
		return testbed.WriteFile(t, dir, "fleet.yaml", fmt.Sprintf(`name: ldap.example.test
zone: example.test
ttl: 1
dns: {server: "%s", tsig: {name: fleet-key, algorithm: hmac-sha256, secret_file: fleet.key}}
probe: {ca: %s, cert: %s, key: %s, server_name: %s, port: %s}
origin: {%s}
edges:
  - {name: e1, ipv4: 127.0.0.2}
`, server, o.PKI.Path("ca.pem"), o.PKI.Path("agent.pem"), o.PKI.Path("agent.key"), testbed.ServerName, p, originKeys))
	}
	inv := yaml("")
	testbed.Start(t, fleetBin(t), "--config", inv, "dns", "serve")
	waitDNS(t, server)
	if r := fleetRun(t, nil, "--config", inv, "apply", "--no-firewall", "--allow-loopback"); r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	refused := func(r run) string {
		t.Helper()
		for _, line := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(line); len(f) > 3 && f[0] == "e1" {
				return f[len(f)-3] // REFUSED, ACTIVE, STATE
			}
		}
		t.Fatalf("no row for e1:\n%s%s", r.stdout, r.stderr)
		return ""
	}
	status := func(what, originKeys string, args ...string) run {
		t.Helper()
		r := fleetRun(t, nil, append([]string{"--config", yaml(originKeys), "status", "--no-firewall"}, args...)...)
		t.Logf("%s:\n%s%s", what, r.stdout, r.stderr)
		if r.code != 0 {
			t.Fatalf("%s: exit %d", what, r.code)
		}
		return r
	}

	if r := status("without origin.metrics", ""); refused(r) != "-" || !strings.Contains(r.stdout, "REFUSED") || r.stderr != "" {
		t.Fatalf("without origin.metrics: REFUSED %q, stderr %q", refused(r), r.stderr)
	}

	flooded := registryOrigin(t, "127.0.0.2", 30)
	r := status("a real front refusing 30 more connections of 127.0.0.2 before every read", `metrics: "`+flooded+`"`)
	v, err := strconv.ParseFloat(strings.TrimSuffix(refused(r), "/s"), 64)
	// 30 between two reads at least a second apart.
	if err != nil || !strings.HasSuffix(refused(r), "/s") || v <= 0 || v > 30 || r.stderr != "" {
		t.Fatalf("REFUSED %q (%v), stderr %q; want a rate in (0, 30]/s", refused(r), err, r.stderr)
	}
	r = status("the same, as JSON", `metrics: "`+flooded+`"`, "--output", "json")
	var js struct {
		Edges []struct {
			Edge    string
			Refused *float64
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || len(js.Edges) != 1 || js.Edges[0].Refused == nil ||
		*js.Edges[0].Refused <= 0 || *js.Edges[0].Refused > 30 {
		t.Fatalf("json: %v %+v", err, js)
	}

	real := originBinaryMetrics(t)
	if r := status("the real origin's metrics", `metrics: "`+real+`"`); refused(r) != "0.0/s" || r.stderr != "" {
		t.Fatalf("real origin: REFUSED %q, stderr %q; want 0.0/s and no warning", refused(r), r.stderr)
	}

	gone := testbed.FreeAddr(t, "127.0.0.1")
	r = status("origin.metrics where nothing listens", `metrics: "`+gone+`"`)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if refused(r) != "?" || len(lines) != 1 || !strings.HasPrefix(lines[0], "warning: origin.metrics: metrics http://"+gone+"/metrics: ") {
		t.Fatalf("unreadable: REFUSED %q, stderr %q; want ? and one warning line", refused(r), r.stderr)
	}
	r = status("the same, as JSON", `metrics: "`+gone+`"`, "--output", "json")
	if !strings.Contains(r.stdout, `"refused": null,`) {
		t.Fatalf("json without a rate:\n%s", r.stdout)
	}
}

// registryOrigin serves, on a loopback port with the origin's handler
// (cli.Metrics), the metrics of a real front (origin.New) whose
// front.per_edge lets edge open one connection an hour: before every
// read, edge opens step more connections to the front, which refuses and
// counts them in edgefleet_front_edge_refused_total, and the read waits
// until they are counted.
func registryOrigin(t *testing.T, edge string, step int) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	fc := origin.DefaultConfig()
	fc.Inner = testbed.FreeAddr(t, "127.0.0.1")
	fc.TrustedEdges = []string{edge + "/32"}
	fc.PerEdge = origin.PerEdge{Rate: "1/h", Burst: 1}
	front, err := origin.New(fc, origin.NewPeerTable(), slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	fln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go front.Serve(fln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		front.Shutdown(ctx)
	})
	var mu sync.Mutex
	want := 0.0
	dial := func() {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(edge)}, Timeout: 5 * time.Second}
		if c, err := d.Dial("tcp", fln.Addr().String()); err == nil {
			c.Close()
		}
	}
	dial() // the one connection an hour: admitted, counted nowhere
	metrics := cli.Metrics(reg)
	srv := cli.HTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		for range step {
			dial()
		}
		want += float64(step)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if v, _ := testbed.Metric(t, reg, deploy.RefusedMetric, map[string]string{"edge": edge, "reason": "rate"}); v >= want {
				break
			}
		}
		metrics.ServeHTTP(w, r)
	}), slog.New(slog.DiscardHandler), "metrics")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// originBinaryMetrics starts the origin binary (front only) and returns
// its metrics address.
func originBinaryMetrics(t *testing.T) string {
	t.Helper()
	bin := testbed.Build(t, "github.com/edgefleet/edgefleet/cmd/origin")
	front, inner, metrics := testbed.FreeAddr(t, "127.0.0.1"), testbed.FreeAddr(t, "127.0.0.1"), testbed.FreeAddr(t, "127.0.0.1")
	cfg := testbed.WriteFile(t, t.TempDir(), "origin.yaml", fmt.Sprintf(`front:
  listen: [%q]
  inner: %q
  trusted_edges: ["127.0.0.1/32"]
peers_api: ""
metrics: %q
core:
  enabled: false
`, front, inner, metrics))
	testbed.Start(t, bin, "--config", cfg)
	testbed.WaitTCP(t, metrics, 10*time.Second)
	return metrics
}

// oneEdge starts the stack (stack.Start) with an edge e1 on 127.0.0.2 at
// a low port, and returns the stack and that port.
func oneEdge(t *testing.T) (*stack.Origin, string) {
	t.Helper()
	o := stack.Start(t)
	port, err := testbed.LowPort("127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	p := strconv.Itoa(port)
	o.EdgeAt(t, "e1", "127.0.0.2:"+p)
	return o, p
}
