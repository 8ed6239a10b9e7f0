package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"golang.org/x/crypto/ssh"
)

// TestPoolFailsClosed: an inventory whose origin hosts' sshd cannot be
// reached (nothing listens on their ports) converges nothing: apply stops
// before DNS moves, naming the first host, and status shows each host's
// firewall unread and exits 1. The embedded DNS server is the real peer;
// no iptables of this machine is touched. (The hosts reached for real:
// deploy.TestPoolOverSSH.)
func TestPoolFailsClosed(t *testing.T) {
	dir := t.TempDir()
	server := lowAddr(t)
	testbed.WriteFile(t, dir, "fleet.key", testbed.WrongKeySecret+"\n")
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	identity := testbed.WriteFile(t, dir, "operator", string(pem.EncodeToMemory(block)))
	os.Chmod(identity, 0o600)
	sshA, sshB := testbed.FreeAddr(t, "127.0.0.1"), testbed.FreeAddr(t, "127.0.0.1")
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJzaL4nfthNmBsJ4jMRTX6V25xL0NYFc5pcB3WZgOtWX"
	inv := testbed.WriteFile(t, dir, "fleet.yaml", fmt.Sprintf(`name: ldap.example.test
zone: example.test
ttl: 1
dns: {server: "%s", tsig: {name: fleet-key, algorithm: hmac-sha256, secret_file: fleet.key}}
origins:
  - {name: par-a, address: 192.0.2.2, ssh: "root@%s", host_key: "%s"}
  - {name: par-b, address: 192.0.2.3, ssh: "root@%s", host_key: "%s"}
deploy: {identity: %s}
edges:
  - {name: e1, ipv4: 127.0.0.2}
`, server, sshA, key, sshB, key, identity))
	testbed.Start(t, fleetBin(t), "--config", inv, "dns", "serve")
	waitDNS(t, server)

	r := fleetRun(t, nil, "--config", inv, "apply", "--allow-loopback")
	if r.code != 1 || !strings.Contains(r.stderr, "firewall: origin par-a: dial "+sshA+": ") {
		t.Fatalf("apply over an unreachable pool: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if l := fleetRun(t, nil, "--config", inv, "dns", "list", "--format", "json"); l.code != 0 || !strings.Contains(l.stdout, `"a":[]`) {
		t.Fatalf("DNS after the refused apply: exit %d\n%s%s", l.code, l.stdout, l.stderr)
	}

	s := fleetRun(t, nil, "--config", inv, "status")
	if s.code != 1 || !strings.Contains(s.stdout, "ORIGIN  FIREWALL  DRIFT") ||
		!strings.Contains(s.stdout, "par-a   ?         ? dial "+sshA+": ") ||
		!strings.Contains(s.stdout, "par-b   ?         ? dial "+sshB+": ") ||
		!strings.Contains(s.stderr, "origin par-b: the firewall cannot be read") {
		t.Fatalf("status over an unreachable pool: exit %d\n%s%s", s.code, s.stdout, s.stderr)
	}
	t.Logf("status:\n%s%s", s.stdout, s.stderr)
	j := fleetRun(t, nil, "--config", inv, "status", "--output", "json")
	if j.code != 1 || !strings.Contains(j.stdout, `"origins": [`) || !strings.Contains(j.stdout, `"name": "par-b"`) {
		t.Fatalf("status --output json: exit %d\n%s%s", j.code, j.stdout, j.stderr)
	}
}
