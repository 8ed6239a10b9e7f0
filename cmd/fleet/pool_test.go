package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestPoolFailsClosed: an inventory whose origin hosts' firewalls fleet
// cannot drive (both over ssh, which this fleet does not do yet) converges
// nothing: apply stops before DNS moves, naming the first host, and
// status shows each host's firewall unread and exits 1. The embedded DNS
// server is the real peer; no iptables of this machine is touched.
func TestPoolFailsClosed(t *testing.T) {
	dir := t.TempDir()
	server := lowAddr(t)
	testbed.WriteFile(t, dir, "fleet.key", testbed.WrongKeySecret+"\n")
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJzaL4nfthNmBsJ4jMRTX6V25xL0NYFc5pcB3WZgOtWX"
	inv := testbed.WriteFile(t, dir, "fleet.yaml", fmt.Sprintf(`name: ldap.example.test
zone: example.test
ttl: 1
dns: {server: "%s", tsig: {name: fleet-key, algorithm: hmac-sha256, secret_file: fleet.key}}
origins:
  - {name: par-a, address: 192.0.2.2, ssh: "root@192.0.2.2", host_key: "%s"}
  - {name: par-b, address: 192.0.2.3, ssh: "root@192.0.2.3", host_key: "%s"}
edges:
  - {name: e1, ipv4: 127.0.0.2}
`, server, key, key))
	testbed.Start(t, fleetBin(t), "--config", inv, "dns", "serve")
	waitDNS(t, server)

	r := fleetRun(t, nil, "--config", inv, "apply", "--allow-loopback")
	if r.code != 1 || !strings.Contains(r.stderr, "origin par-a: its firewall is reached over ssh (root@192.0.2.2)") {
		t.Fatalf("apply over an unreachable pool: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if l := fleetRun(t, nil, "--config", inv, "dns", "list", "--format", "json"); l.code != 0 || !strings.Contains(l.stdout, `"a":[]`) {
		t.Fatalf("DNS after the refused apply: exit %d\n%s%s", l.code, l.stdout, l.stderr)
	}

	s := fleetRun(t, nil, "--config", inv, "status")
	if s.code != 1 || !strings.Contains(s.stdout, "ORIGIN  FIREWALL  DRIFT") ||
		!strings.Contains(s.stdout, "par-a   ?         ? its firewall is reached over ssh") ||
		!strings.Contains(s.stdout, "par-b   ?         ? its firewall is reached over ssh") ||
		!strings.Contains(s.stderr, "origin par-b: the firewall cannot be read") {
		t.Fatalf("status over an unreachable pool: exit %d\n%s%s", s.code, s.stdout, s.stderr)
	}
	t.Logf("status:\n%s%s", s.stdout, s.stderr)
	j := fleetRun(t, nil, "--config", inv, "status", "--output", "json")
	if j.code != 1 || !strings.Contains(j.stdout, `"origins": [`) || !strings.Contains(j.stdout, `"name": "par-b"`) {
		t.Fatalf("status --output json: exit %d\n%s%s", j.code, j.stdout, j.stderr)
	}
}
