package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/edgefleet/edgefleet/deploy"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// fleetBin builds this command once per test run and returns the binary.
func fleetBin(t *testing.T) string {
	t.Helper()
	f, _ := binaries(t)
	return f
}

// TestMain removes the binaries the tests built (binaries).
func TestMain(m *testing.M) { testbed.Main(m) }

// run is one run of the fleet binary.
type run struct {
	stdout, stderr string
	code           int
}

// fleetRun runs the binary (inside ns when not nil) and returns what it
// printed and its exit status.
func fleetRun(t *testing.T, ns *testbed.Netns, args ...string) run {
	t.Helper()
	bin := fleetBin(t)
	cmd := exec.Command(bin, args...)
	if ns != nil {
		cmd = ns.Command(bin, args...)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	r := run{stdout: o.String(), stderr: e.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("fleet %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// oneLineFailure checks that r failed with exit code and exactly one
// stderr line containing want.
func oneLineFailure(t *testing.T, what string, r run, code int, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != code || len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Fatalf("%s: exit %d, stderr %q; want exit %d and one line containing %q", what, r.code, r.stderr, code, want)
	}
	t.Logf("%s: %s", what, lines[0])
}

// inventory writes a fleet.yaml for the test zone example.test.
func inventory(t *testing.T, dir, server, keyFile, name string, edges ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# the fleet of the DNS tests\nname: " + name + "\nzone: example.test\nttl: 60\n")
	b.WriteString("dns:\n  server: \"" + server + "\"\n  tsig: {name: fleet-key, algorithm: hmac-sha256, secret_file: " + keyFile + "}\n")
	b.WriteString("edges:\n")
	for _, e := range edges {
		n, addrs, _ := strings.Cut(e, "=")
		v4, v6, _ := strings.Cut(addrs, ",")
		b.WriteString("  - {name: " + n + ", ipv4: " + v4)
		if v6 != "" {
			b.WriteString(", ipv6: \"" + v6 + "\"")
		}
		b.WriteString("}\n")
	}
	return testbed.WriteFile(t, dir, "fleet.yaml", b.String())
}

// digSet is the sorted dig +short answer for name and type.
func digSet(t *testing.T, server, name, typ string) []string {
	t.Helper()
	host, port, _ := net.SplitHostPort(server)
	out, err := exec.Command("dig", "@"+host, "-p", port, "+short", "+time=2", "+tries=2", name, typ).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %s %s: %v\n%s", name, typ, err, out)
	}
	set := strings.Split(strings.TrimSpace(string(out)), "\n")
	if set[0] == "" {
		set = nil
	}
	slices.Sort(set)
	return set
}

func wantSet(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: dig answers %q, want %q", what, got, want)
	}
}

// dnsPeer is an authoritative server the DNS commands are tested against.
type dnsPeer struct {
	name string
	// start serves example.test with the extra records on an address,
	// letting the key update only ldap.example.test; it returns the
	// address and the key file.
	start func(t *testing.T, dir string, records []string) (addr, keyFile string)
	// restart stops and starts it again on the same address and files
	// (nil: not tested).
	restart func(t *testing.T)
}

// TestDNSCommands runs fleet dns plan, apply and list against BIND 9 and
// against the embedded server, checking every change with dig: only the
// A/AAAA RRsets of name change; a wrong key, an unauthorised name and an
// unreachable server each fail with one line, exit 1, and change nothing.
func TestDNSCommands(t *testing.T) {
	testbed.Need(t, "dig")
	peers := dnsPeers()
	for _, peer := range peers {
		t.Run(peer.name, func(t *testing.T) {
			dir := t.TempDir()
			srvDir := t.TempDir()
			addr, key := peer.start(t, srvDir, []string{"other 300 IN A 192.0.2.99", `ldap 300 IN TXT "not ours"`})
			cfg := inventory(t, dir, addr, key, "ldap.example.test", "e1=192.0.2.1,2001:db8::1", "e2=192.0.2.2")

			r := fleetRun(t, nil, "--config", cfg, "dns", "list", "--format", "json")
			if r.code != 0 || strings.TrimSpace(r.stdout) != `{"name":"ldap.example.test","ttl":0,"a":[],"aaaa":[]}` {
				t.Fatalf("list before: exit %d %q %s", r.code, r.stdout, r.stderr)
			}
			r = fleetRun(t, nil, "--config", cfg, "dns", "plan")
			wantPlan := "; ldap.example.test.: (none) -> 192.0.2.1 192.0.2.2 2001:db8::1 (3 updates)\n" +
				"update add ldap.example.test. 60 IN A 192.0.2.1 ; e1\nsend\n" +
				"update add ldap.example.test. 60 IN A 192.0.2.2 ; e2\nsend\n" +
				"update add ldap.example.test. 60 IN AAAA 2001:db8::1 ; e1\nsend\n"
			if r.code != 0 || r.stdout != wantPlan {
				t.Fatalf("plan: exit %d\n%s%s\nwant:\n%s", r.code, r.stdout, r.stderr, wantPlan)
			}
			if got := digSet(t, addr, "ldap.example.test", "A"); len(got) != 0 {
				t.Fatalf("plan changed DNS: %q", got)
			}

			r = fleetRun(t, nil, "--config", cfg, "dns", "apply")
			if r.code != 0 {
				t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			t.Logf("apply:\n%s", r.stdout)
			wantSet(t, "after apply", digSet(t, addr, "ldap.example.test", "A"), "192.0.2.1", "192.0.2.2")
			wantSet(t, "after apply", digSet(t, addr, "ldap.example.test", "AAAA"), "2001:db8::1")
			r = fleetRun(t, nil, "--config", cfg, "dns", "list", "--format", "json")
			var list rrsetJSON
			if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || list.TTL != 60 ||
				!slices.Equal(list.A, []string{"192.0.2.1", "192.0.2.2"}) || !slices.Equal(list.AAAA, []string{"2001:db8::1"}) {
				t.Fatalf("list after apply: %q %v", r.stdout, err)
			}
			if r = fleetRun(t, nil, "--config", cfg, "dns", "apply"); r.code != 0 || !strings.Contains(r.stdout, "in sync") {
				t.Fatalf("second apply: exit %d %q", r.code, r.stdout)
			}

			// A change: e1 is replaced by e3.
			cfg = inventory(t, dir, addr, key, "ldap.example.test", "e2=192.0.2.2", "e3=192.0.2.3")
			r = fleetRun(t, nil, "--config", cfg, "dns", "apply")
			if r.code != 0 {
				t.Fatalf("apply e1 -> e3: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			// Additions come before removals.
			if i, j := strings.Index(r.stdout, "add A 192.0.2.3"), strings.Index(r.stdout, "remove A 192.0.2.1"); i < 0 || j < i {
				t.Fatalf("apply e1 -> e3 did not add before removing:\n%s", r.stdout)
			}
			wantSet(t, "after e1 -> e3", digSet(t, addr, "ldap.example.test", "A"), "192.0.2.2", "192.0.2.3")
			wantSet(t, "after e1 -> e3", digSet(t, addr, "ldap.example.test", "AAAA"))
			// What it removed is draining in the state from now on: a
			// firewall change keeps it allowed until apply has waited.
			st, err := deploy.LoadState(filepath.Join(dir, deploy.StateFile))
			if e1 := st.Edges["e1"]; err != nil || e1 == nil || e1.State != deploy.StateDraining || e1.LeftDNS.IsZero() || e1.TTL != 60 {
				t.Fatalf("state after dns apply removed e1: %v\n%s", err, st.Marshal())
			}
			wantSet(t, "unrelated name", digSet(t, addr, "other.example.test", "A"), "192.0.2.99")
			wantSet(t, "unrelated RRset of name", digSet(t, addr, "ldap.example.test", "TXT"), `"not ours"`)

			// A TTL change rewrites each family's set in one UPDATE.
			cfg = inventory(t, dir, addr, key, "ldap.example.test", "e2=192.0.2.2", "e3=192.0.2.3")
			os.WriteFile(cfg, []byte(strings.Replace(readFile(t, cfg), "ttl: 60", "ttl: 30", 1)), 0o600)
			if r := fleetRun(t, nil, "--config", cfg, "dns", "apply"); r.code != 0 || !strings.Contains(r.stdout, "ttl A -> 30, read back") {
				t.Fatalf("ttl change: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			dh, dp, _ := net.SplitHostPort(addr)
			out, _ := exec.Command("dig", "@"+dh, "-p", dp, "+noall", "+answer", "ldap.example.test", "A").CombinedOutput()
			if strings.Count(string(out), "\t30\tIN\tA\t") != 2 {
				t.Fatalf("after the TTL change dig answers:\n%s", out)
			}
			if st, err := deploy.LoadState(filepath.Join(dir, deploy.StateFile)); err != nil || len(st.TTLChanges) != 1 || st.TTLChanges[0].TTL != 60 {
				t.Fatalf("the replaced TTL is not in the state: %v\n%s", err, st.Marshal())
			}

			unchanged := func(what string) {
				t.Helper()
				wantSet(t, what, digSet(t, addr, "ldap.example.test", "A"), "192.0.2.2", "192.0.2.3")
			}
			bad := filepath.Join(t.TempDir(), "wrong.key")
			os.WriteFile(bad, []byte("key \"fleet-key\" {\n\talgorithm hmac-sha256;\n\tsecret \"c29tZXRoaW5nIGVsc2UgZW50aXJlbHkgZGlmZmVyZW50\";\n};\n"), 0o600)
			wrong := inventory(t, t.TempDir(), addr, bad, "ldap.example.test", "e2=192.0.2.2", "e3=192.0.2.3", "e4=192.0.2.4")
			oneLineFailure(t, "wrong key", fleetRun(t, nil, "--config", wrong, "dns", "apply"), 1, "rejected TSIG key fleet-key.")
			unchanged("after the wrong key")

			unknown := inventory(t, t.TempDir(), addr, key, "ldap.example.test", "e2=192.0.2.2", "e3=192.0.2.3", "e4=192.0.2.4")
			os.WriteFile(unknown, []byte(strings.Replace(readFile(t, unknown), "name: fleet-key", "name: other-key", 1)), 0o600)
			oneLineFailure(t, "unknown key", fleetRun(t, nil, "--config", unknown, "dns", "apply"), 1, "rejected TSIG key other-key.: BADKEY")
			unchanged("after the unknown key")

			other := inventory(t, t.TempDir(), addr, key, "forbidden.example.test", "e4=192.0.2.4")
			oneLineFailure(t, "unauthorised name", fleetRun(t, nil, "--config", other, "dns", "apply"), 1, "REFUSED")
			if got := digSet(t, addr, "forbidden.example.test", "A"); len(got) != 0 {
				t.Fatalf("the refused update published %q", got)
			}

			gone := inventory(t, t.TempDir(), lowAddr(t), key, "ldap.example.test", "e4=192.0.2.4")
			oneLineFailure(t, "unreachable server", fleetRun(t, nil, "--config", gone, "dns", "apply"), 1, "connection refused")
			oneLineFailure(t, "unreachable server", fleetRun(t, nil, "--config", gone, "dns", "list"), 1, "connection refused")
			unchanged("after the unreachable server")

			if peer.restart != nil {
				peer.restart(t)
				waitDNS(t, addr)
				wantSet(t, "after a restart", digSet(t, addr, "ldap.example.test", "A"), "192.0.2.2", "192.0.2.3")
				wantSet(t, "after a restart", digSet(t, addr, "other.example.test", "A"), "192.0.2.99")
				cfg = inventory(t, dir, addr, key, "ldap.example.test", "e3=192.0.2.3")
				if r := fleetRun(t, nil, "--config", cfg, "dns", "apply"); r.code != 0 {
					t.Fatalf("apply after restart: exit %d %s", r.code, r.stderr)
				}
				wantSet(t, "update after a restart", digSet(t, addr, "ldap.example.test", "A"), "192.0.2.3")
			}
		})
	}
}

// dnsPeers are the servers the DNS commands are tested against: BIND 9
// and the embedded server (fleet dns serve, restartable).
func dnsPeers() []dnsPeer {
	var embedded *testbed.Proc
	var embeddedArgs []string
	return []dnsPeer{
		{name: "bind", start: func(t *testing.T, dir string, records []string) (string, string) {
			n := testbed.StartNamed(t, testbed.NamedConfig{Zone: "example.test", Records: records, Names: []string{"ldap.example.test"}})
			return n.Addr, n.KeyFile
		}},
		{name: "embedded", start: func(t *testing.T, dir string, records []string) (string, string) {
			addr := lowAddr(t)
			key := testbed.WriteFile(t, dir, "server.key", testbed.WrongKeySecret+"\n")
			// The zone file starts with the unrelated records (an operator's
			// own), the server adds nothing but SOA serials to them.
			zone := "$ORIGIN example.test.\n@ 60 IN SOA ns1.example.test. hostmaster.example.test. 1 3600 600 86400 60\n@ 60 IN NS ns1.example.test.\n" +
				strings.Join(records, "\n") + "\n"
			testbed.WriteFile(t, dir, "fleet.zone", zone)
			cfg := inventory(t, filepath.Join(dir), addr, key, "ldap.example.test")
			embeddedArgs = []string{"--config", cfg, "dns", "serve"}
			embedded = testbed.Start(t, fleetBin(t), embeddedArgs...)
			waitDNS(t, addr)
			return addr, key
		}, restart: func(t *testing.T) {
			embedded.Stop()
			embedded = testbed.Start(t, fleetBin(t), embeddedArgs...)
		}},
	}
}

// lowAddr returns a 127.0.0.1 address whose port is free right now and
// below the ephemeral range (testbed.LowPort), for a server the test
// starts later.
func lowAddr(t *testing.T) string {
	t.Helper()
	port, err := testbed.LowPort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// waitDNS waits until a DNS server answers on addr (UDP).
func waitDNS(t *testing.T, addr string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err := exec.Command("dig", "@"+host, "-p", port, "+time=1", "+tries=1", "example.test", "SOA").CombinedOutput()
		if err == nil && strings.Contains(string(out), "status: NOERROR") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no DNS server on %s: %v\n%s", addr, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDNSServeCorruptZone: a zone file that does not parse stops dns serve
// with one line naming the file, and the file is left as it was.
func TestDNSServeCorruptZone(t *testing.T) {
	dir := t.TempDir()
	key := testbed.WriteFile(t, dir, "fleet.key", testbed.WrongKeySecret+"\n")
	cfg := inventory(t, dir, testbed.FreeAddr(t, "127.0.0.1"), key, "ldap.example.test", "e1=192.0.2.1")
	corrupt := "$ORIGIN example.test.\n@ 60 IN SOA ns1 hostmaster 1 3600 600 86400 60\nldap 60 IN A 192.0.2.300\n"
	zf := testbed.WriteFile(t, dir, "fleet.zone", corrupt)
	oneLineFailure(t, "corrupt zone", fleetRun(t, nil, "--config", cfg, "dns", "serve"), 2, "zone file "+zf)
	if b, _ := os.ReadFile(zf); string(b) != corrupt {
		t.Fatalf("the corrupt zone file was rewritten:\n%s", b)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
