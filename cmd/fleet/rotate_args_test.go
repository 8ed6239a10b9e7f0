package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestRotateArguments: fleet rotate against our edges and the embedded DNS
// server refuses an --in with three addresses (exit 2) instead of dropping
// one, names the edge that already has the new edge's address, changes
// fleet.yaml in neither case, and a rotation that changes nothing says so
// instead of "resuming".
func TestRotateArguments(t *testing.T) {
	testbed.Need(t, "slapd", "dig")
	o, p := oneEdge(t)
	o.EdgeAt(t, "e2", "127.0.0.3:"+p)
	dir := t.TempDir()
	server := lowAddr(t)
	testbed.WriteFile(t, dir, "fleet.key", testbed.WrongKeySecret+"\n")
	inv := testbed.WriteFile(t, dir, "fleet.yaml", fmt.Sprintf(`name: ldap.example.test
zone: example.test
ttl: 1
drain_timeout: 1s
dns: {server: "%s", tsig: {name: fleet-key, algorithm: hmac-sha256, secret_file: fleet.key}}
probe: {ca: %s, cert: %s, key: %s, server_name: %s, port: %s}
edges:
  - {name: e1, ipv4: 127.0.0.2}
  - {name: e2, ipv4: 127.0.0.3}
`, server, o.PKI.Path("ca.pem"), o.PKI.Path("agent.pem"), o.PKI.Path("agent.key"), testbed.ServerName, p))
	testbed.Start(t, fleetBin(t), "--config", inv, "dns", "serve")
	waitDNS(t, server)
	if r := fleetRun(t, nil, "--config", inv, "apply", "--no-firewall", "--allow-loopback", "--slack", "0s"); r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	before := readFile(t, inv)

	r := fleetRun(t, nil, "--config", inv, "rotate", "--no-firewall", "--allow-loopback", "--out", "e1", "--in", "e5=127.0.0.4,::1,127.0.0.5")
	oneLineFailure(t, "three addresses", r, 2, `--in "e5=127.0.0.4,::1,127.0.0.5": 3 addresses, want at most two`)
	r = fleetRun(t, nil, "--config", inv, "rotate", "--no-firewall", "--allow-loopback", "--out", "e1", "--in", "e3=127.0.0.3")
	oneLineFailure(t, "e2's address", r, 2, `--in e3=127.0.0.3: 127.0.0.3 is already the address of edge "e2"`)
	if readFile(t, inv) != before {
		t.Fatalf("a refused rotation edited fleet.yaml:\n%s", readFile(t, inv))
	}

	r = fleetRun(t, nil, "--config", inv, "rotate", "--no-firewall", "--allow-loopback", "--slack", "0s", "--out", "e1", "--in", "e1=127.0.0.2")
	t.Logf("no-op rotation:\n%s%s", r.stdout, r.stderr)
	if r.code != 0 || strings.Contains(r.stdout, "resuming") || !strings.Contains(r.stdout, "fleet.yaml already lists e1=127.0.0.2: nothing to rotate") {
		t.Fatalf("no-op rotation: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	wantSet(t, "after the no-op rotation", digSet(t, server, "ldap.example.test", "A"), "127.0.0.2", "127.0.0.3")
}
