package main

import (
	"fmt"
	"github.com/edgefleet/edgefleet/deploy"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
)

// TestApplyNoFirewall converges on loopback, as the demo does, with the
// embedded DNS server and without a firewall: our edges on 127.0.0.2-4
// in front of our origin, fleet apply publishes e1 and e2 after probing
// them end to end, fleet rotate swaps e1 for e3, fleet status shows both,
// and an edge whose origin is gone fails its probe and is not published.
func TestApplyNoFirewall(t *testing.T) {
	testbed.Need(t, "slapd", "dig")
	o := stack.Start(t)
	port, err := testbed.LowPort("127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	p := strconv.Itoa(port)
	for i, name := range []string{"e1", "e2", "e3"} {
		o.EdgeAt(t, name, fmt.Sprintf("127.0.0.%d:%s", i+2, p))
	}
	// e4 accepts but its origin is gone: the probe must catch it.
	dead := testbed.FreeAddr(t, "127.0.0.1")
	stack.EdgeTo(t, "e4", "127.0.0.5:"+p, dead)

	dir := t.TempDir()
	server := lowAddr(t)
	testbed.WriteFile(t, dir, "fleet.key", testbed.WrongKeySecret+"\n")
	yaml := func(edges ...string) string {
		return testbed.WriteFile(t, dir, "fleet.yaml", fmt.Sprintf(`name: ldap.example.test
zone: example.test
ttl: 1
drain_timeout: 1s
dns: {server: "%s", tsig: {name: fleet-key, algorithm: hmac-sha256, secret_file: fleet.key}}
probe: {ca: %s, cert: %s, key: %s, server_name: %s, port: %s}
edges:
%s`, server, o.PKI.Path("ca.pem"), o.PKI.Path("agent.pem"), o.PKI.Path("agent.key"), testbed.ServerName, p, strings.Join(edges, "")))
	}
	inv := yaml("  - {name: e1, ipv4: 127.0.0.2}\n", "  - {name: e2, ipv4: 127.0.0.3}\n")
	testbed.Start(t, fleetBin(t), "--config", inv, "dns", "serve")
	waitDNS(t, server)

	// Loopback edges are refused unless asked for: no agent reaches them.
	r := fleetRun(t, nil, "--config", inv, "apply", "--no-firewall", "--slack", "0s")
	if r.code != 2 || !strings.Contains(r.stderr, "edges[0].ipv4: 127.0.0.2 (edge \"e1\") is a loopback address") {
		t.Fatalf("apply with loopback edges: exit %d, want 2\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = fleetRun(t, nil, "--config", inv, "apply", "--no-firewall", "--slack", "-1s", "--allow-loopback")
	oneLineFailure(t, "negative slack", r, 2, "--slack -1s: must not be negative")

	r = fleetRun(t, nil, "--config", inv, "apply", "--no-firewall", "--allow-loopback", "--slack", "0s")
	if r.code != 0 || !strings.Contains(r.stdout, "step 1/6 firewall: skipped (no firewall)") || !strings.Contains(r.stdout, "step 2/6 probe: e2 127.0.0.3:"+p+" ok") {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	wantSet(t, "after apply", digSet(t, server, "ldap.example.test", "A"), "127.0.0.2", "127.0.0.3")

	// fleet.yaml is a symlink into a checkout: rotate writes through it.
	checkout := filepath.Join(dir, "checkout")
	os.Mkdir(checkout, 0o700)
	if err := os.Rename(inv, filepath.Join(checkout, "fleet.yaml")); err != nil {
		t.Fatal(err)
	}
	os.Symlink(filepath.Join(checkout, "fleet.yaml"), inv)
	os.WriteFile(filepath.Join(checkout, ".fleet.yaml.tmp4711"), []byte("left by a killed rotate"), 0o600)
	r = fleetRun(t, nil, "--config", inv, "rotate", "--no-firewall", "--allow-loopback", "--slack", "0s", "--out", "e1", "--in", "e3=127.0.0.4")
	if fi, err := os.Lstat(inv); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("rotate replaced the symlinked fleet.yaml: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(checkout, "fleet.yaml")); !strings.Contains(string(b), "e3") {
		t.Errorf("the checkout's fleet.yaml after rotate:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(checkout, ".fleet.yaml.tmp4711")); err == nil {
		t.Errorf("the stale temp file of fleet.yaml is still there")
	}
	t.Logf("rotate:\n%s", r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "e1 has no metrics endpoint: waiting drain_timeout") {
		t.Fatalf("rotate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	wantSet(t, "after rotate", digSet(t, server, "ldap.example.test", "A"), "127.0.0.3", "127.0.0.4")

	r = fleetRun(t, nil, "--config", inv, "status", "--no-firewall")
	t.Logf("status:\n%s", r.stdout)
	if r.code != 0 || strings.Count(r.stdout, " active\n") != 2 || !strings.Contains(r.stdout, "e3    127.0.0.4  yes     -") {
		t.Fatalf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A state file of another inventory is refused, nothing changes.
	sp := filepath.Join(dir, deploy.StateFile)
	own, _ := os.ReadFile(sp)
	os.WriteFile(sp, []byte(strings.Replace(string(own), `"name": "ldap.example.test"`, `"name": "ldap.other.test"`, 1)), 0o600)
	oneLineFailure(t, "foreign state", fleetRun(t, nil, "--config", inv, "apply", "--no-firewall", "--allow-loopback"), 1,
		"belongs to another inventory (name ldap.other.test, zone example.test, origin ports [8636])")
	// status shows the fleet without it and exits 1 saying why.
	r = fleetRun(t, nil, "--config", inv, "status", "--no-firewall")
	oneLineFailure(t, "status with a foreign state", r, 1, "belongs to another inventory (name ldap.other.test")
	if strings.Count(r.stdout, " active\n") != 2 {
		t.Errorf("status with a foreign state:\n%s", r.stdout)
	}
	os.WriteFile(sp, own, 0o600)

	// A rotation that fails before publishing leaves fleet.yaml as it
	// was: a dead new edge, and a DNS server that does not answer.
	before, _ := os.ReadFile(inv)
	r = fleetRun(t, nil, "--config", inv, "rotate", "--no-firewall", "--allow-loopback", "--out", "e2", "--in", "e4=127.0.0.5")
	oneLineFailure(t, "rotate to a dead edge", r, 1, "end-to-end probe failed: e4 not published")
	if after, _ := os.ReadFile(inv); string(after) != string(before) {
		t.Errorf("a failed rotation changed fleet.yaml:\n%s", after)
	}
	downInv := testbed.WriteFile(t, dir, "down.yaml", strings.Replace(string(before), server, testbed.FreeAddr(t, "127.0.0.1"), 1))
	downBefore, _ := os.ReadFile(downInv)
	r = fleetRun(t, nil, "--config", downInv, "rotate", "--timeout", "1s", "--no-firewall", "--allow-loopback", "--out", "e2", "--in", "e4=127.0.0.5")
	if after, _ := os.ReadFile(downInv); r.code != 1 || string(after) != string(downBefore) {
		t.Errorf("rotate with the DNS server down: exit %d, fleet.yaml changed: %v\n%s", r.code, string(after) != string(downBefore), r.stderr)
	}

	inv = yaml("  - {name: e2, ipv4: 127.0.0.3}\n", "  - {name: e3, ipv4: 127.0.0.4}\n", "  - {name: e4, ipv4: 127.0.0.5}\n")
	r = fleetRun(t, nil, "--config", inv, "apply", "--no-firewall", "--allow-loopback")
	oneLineFailure(t, "dead edge", r, 1, "end-to-end probe failed: e4 not published")
	wantSet(t, "after the dead edge", digSet(t, server, "ldap.example.test", "A"), "127.0.0.3", "127.0.0.4")
	r = fleetRun(t, nil, "--config", inv, "status", "--no-firewall")
	if !strings.Contains(r.stdout, "e4") || !strings.HasSuffix(strings.TrimSpace(r.stdout), "failed") {
		t.Fatalf("status with the dead edge:\n%s", r.stdout)
	}
	t.Logf("status with the dead edge:\n%s", r.stdout)
}
