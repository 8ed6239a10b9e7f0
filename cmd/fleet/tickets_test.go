package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/ticketkeys"
	"golang.org/x/crypto/ssh"
)

// TestTicketsRotateOverThePool: an origin pool of two hosts, par-a the
// one fleet runs on and par-b behind a real OpenSSH sshd with its pinned
// host key. fleet tickets rotate writes one key file (mode 0600) to both
// and runs tickets.reload on each; later rotations append a key and drop
// the oldest beyond tickets.keep, and both hosts always hold fleet's
// copy. A host whose key is not the pinned one stops the rotation with
// nothing written anywhere and fleet's copy unchanged; tickets push
// writes the last rotation's keys again.
func TestTicketsRotateOverThePool(t *testing.T) {
	ns := testbed.NewNetns(t, "pool")
	sshd := testbed.StartSSHD(t, ns, "127.0.0.1:22")
	dir, root := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "etc", "ticket.keys") // par-a's; par-b's is under root
	reloads := filepath.Join(dir, "reloads")
	hostKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshd.HostKey)))
	inventory := func(hostKey string) string {
		return testbed.WriteFile(t, dir, "fleet.yaml", fmt.Sprintf(`name: ldap.example.test
zone: example.test
dns: {server: "127.0.0.1:53", tsig: {name: fleet-key, secret: "c2VjcmV0"}}
origins:
  - {name: par-a, address: 192.0.2.2}
  - {name: par-b, address: 192.0.2.3, ssh: "root@%s", host_key: "%s"}
deploy: {identity: %s}
tickets: {path: %s, keep: 3, reload: "echo reloaded >> %s"}
edges:
  - {name: e1, ipv4: 192.0.2.10}
`, sshd.Addr, hostKey, sshd.ClientKeyFile, path, reloads))
	}
	inv := inventory(hostKey)
	master := filepath.Join(dir, "fleet-ticket.keys")
	read := func(p string) ticketkeys.Keys {
		t.Helper()
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %o, want 600", p, st.Mode().Perm())
		}
		raw, _ := os.ReadFile(p)
		k, err := ticketkeys.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	same := func(want int) ticketkeys.Keys {
		t.Helper()
		m, a, b := read(master), read(path), read(root+path)
		if len(m) != want || string(m.Format()) != string(a.Format()) || string(m.Format()) != string(b.Format()) {
			t.Fatalf("fleet's copy %d keys, par-a %d, par-b %d: want %d keys, the same on all three", len(m), len(a), len(b), want)
		}
		return m
	}

	r := fleetRun(t, ns, "--config", inv, "tickets", "rotate", "--root", root)
	if r.code != 0 || !strings.Contains(r.stdout, "tickets: 1 keys written to "+path+" on par-a, par-b") {
		t.Fatalf("the first rotation: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	first := same(1)
	for range 3 {
		if r := fleetRun(t, ns, "--config", inv, "tickets", "rotate", "--root", root); r.code != 0 {
			t.Fatalf("a rotation: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	}
	keys := same(3) // keep 3: the first key is gone
	if string(keys[0][:]) == string(first[0][:]) {
		t.Error("after four rotations with keep 3 the first key is still there")
	}
	if raw, _ := os.ReadFile(reloads); strings.Count(string(raw), "reloaded") != 8 {
		t.Errorf("tickets.reload ran %d times, want 8 (4 rotations, 2 hosts)", strings.Count(string(raw), "reloaded"))
	}

	// A host key that is not par-b's: nothing written, on either host.
	other := testbed.NewSSHKey(t)
	inventory(strings.TrimSpace(string(ssh.MarshalAuthorizedKey(other))))
	r = fleetRun(t, ns, "--config", inv, "tickets", "rotate", "--root", root)
	if r.code != 1 || !strings.Contains(r.stderr, "host key mismatch") || !strings.Contains(r.stderr, "no origin host written") {
		t.Fatalf("a rotation with par-b's key not the pinned one: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	same(3)

	inventory(hostKey)
	os.Remove(root + path)
	if r := fleetRun(t, ns, "--config", inv, "tickets", "push", "--root", root); r.code != 0 {
		t.Fatalf("push: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := same(3); string(got.Format()) != string(keys.Format()) {
		t.Error("push wrote other keys than the last rotation's")
	}
}
