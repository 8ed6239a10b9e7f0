package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
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
	o := stack.Start(t)
	port, err := testbed.LowPort("127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	p := strconv.Itoa(port)
	o.EdgeAt(t, "e1", "127.0.0.2:"+p)
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
