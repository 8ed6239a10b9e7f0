package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-ldap/ldap/v3"
	"github.com/miekg/dns"

	"github.com/edgefleet/edgefleet/deploy"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
	"github.com/edgefleet/edgefleet/probe"
)

// edgeBin builds cmd/edge once per test run.
func edgeBin(t *testing.T) string { return testbed.Build(t, "github.com/edgefleet/edgefleet/cmd/edge") }

// lanHost is a namespace on the test's LAN (a bridge in its own
// namespace), at 10.77.0.<n> and fd77::<n>.
func lanHost(t *testing.T, lan *testbed.Netns, role string, n int) (*testbed.Netns, string) {
	ns := testbed.NewNetns(t, role)
	peer := "v-" + role
	testbed.Veth(t, ns, "eth0", lan, peer)
	lan.Run("ip", "link", "set", peer, "master", "br0")
	lan.Run("ip", "link", "set", peer, "up")
	ip := fmt.Sprintf("10.77.0.%d", n)
	ns.Run("ip", "addr", "add", ip+"/24", "dev", "eth0")
	ns.Run("ip", "addr", "add", fmt.Sprintf("fd77::%d/64", n), "dev", "eth0", "nodad")
	ns.Run("ip", "link", "set", "eth0", "up")
	return ns, ip
}

// waitNS waits until addr accepts TCP from inside ns.
func waitNS(t *testing.T, ns *testbed.Netns, addr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := ns.Dial("", addr, 300*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not accepting from %s: %v", addr, ns.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRotateEndToEnd moves e1 -> e3 with fleet rotate on a LAN of network
// namespaces: the origin host (our front and core, the firewall in
// --chain INPUT mode, fleet itself), three edges (cmd/edge), an agent and
// BIND 9. While agents resolve the name and connect through the edges
// throughout, the rotation is killed in its TTL wait and run again: the
// name never resolves to an empty set, no agent connection fails, e1
// leaves DNS before it leaves the firewall, e1's open session keeps working
// until it closes and is waited for, a stranger is never let in, and the
// resumed run ends in the expected state.
func TestRotateEndToEnd(t *testing.T) {
	testbed.NeedRoot(t)
	testbed.Need(t, "iptables", "named", "slapd")
	lan := testbed.NewNetns(t, "lan")
	lan.Run("ip", "link", "add", "br0", "type", "bridge")
	lan.Run("ip", "addr", "add", "10.77.0.53/24", "dev", "br0")
	lan.Run("ip", "link", "set", "br0", "up")
	orig, origIP := lanHost(t, lan, "orig", 1)
	agent, _ := lanHost(t, lan, "agent", 100)
	named := testbed.StartNamed(t, testbed.NamedConfig{Zone: "example.test", Netns: lan, IP: "10.77.0.53"})

	// The origin: front in the origin namespace, core and slapd behind it.
	o := stack.StartOn(t, orig.Listen(origIP+":8636"), "10.77.0.0/24")
	edges := map[string]string{}
	for i, name := range []string{"e1", "e2", "e3"} {
		ns, ip := lanHost(t, lan, name, 11+i)
		edges[name] = ip
		cfg := testbed.WriteFile(t, t.TempDir(), "edge.yaml", fmt.Sprintf(
			"name: %s\nlisten: [\"%s:636\", \"[fd77::%d]:636\"]\norigins: [\"%s:8636\"]\nmetrics: \"%s:9101\"\ndrain_timeout: 2s\n", name, ip, 11+i, origIP, ip))
		testbed.StartCmd(t, ns.Command(edgeBin(t), "--config", cfg))
		waitNS(t, agent, ip+":636")
		waitNS(t, agent, fmt.Sprintf("[fd77::%d]:636", 11+i))
	}

	dir := t.TempDir()
	testbed.WriteFile(t, dir, "fleet.key", named.KeySecret+"\n")
	inv := testbed.WriteFile(t, dir, "fleet.yaml", fmt.Sprintf(`# the rotation test's fleet
name: ldap.example.test
zone: example.test
ttl: 3
drain_timeout: 20s
dns:
  server: "%s"
  tsig: {name: fleet-key, algorithm: hmac-sha256, secret_file: fleet.key}
origin: {ports: [8636], interface: eth0}
probe: {ca: %s, cert: %s, key: %s, server_name: %s, budget: 5s}
edges:
  - name: e1 # goes away
    ipv4: %s
    metrics: "%s:9101"
  - name: e2
    ipv4: %s
    metrics: "%s:9101"
`, named.Addr, o.PKI.Path("ca.pem"), o.PKI.Path("agent.pem"), o.PKI.Path("agent.key"), testbed.ServerName,
		edges["e1"], edges["e1"], edges["e2"], edges["e2"]))

	// A corrupt state file stops apply before anything changes.
	sp := testbed.WriteFile(t, dir, deploy.StateFile, "{\"version\":1,")
	oneLineFailure(t, "corrupt state", fleetRun(t, orig, "--config", inv, "apply", "--chain", "INPUT"), 1, "state "+sp+": ")
	if rules := orig.Run("iptables", "-S"); strings.Contains(rules, "EDGEFLEET") {
		t.Fatalf("apply with a corrupt state changed the firewall:\n%s", rules)
	}
	os.Remove(sp)

	r := fleetRun(t, orig, "--config", inv, "apply", "--chain", "INPUT", "--slack", "1s")
	if r.code != 0 {
		t.Fatalf("first apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("fleet apply:\n%s", r.stdout)

	resolve := func() ([]string, error) {
		m := new(dns.Msg).SetQuestion("ldap.example.test.", dns.TypeA)
		var out []string
		err := agent.Do(func() error {
			ans, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, named.Addr)
			if err != nil {
				return err
			}
			for _, rr := range ans.Answer {
				if a, ok := rr.(*dns.A); ok {
					out = append(out, a.A.String())
				}
			}
			return nil
		})
		return out, err
	}
	agentTLS := o.AgentTLS()

	// e1's long session: open before the rotation, used during the wait.
	var sess *ldap.Conn
	if err := agent.Do(func() error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", edges["e1"]+":636", agentTLS)
		if err != nil {
			return err
		}
		sess = ldap.NewConn(c, true)
		sess.Start()
		_, err = sess.WhoAmI(nil)
		return err
	}); err != nil {
		t.Fatalf("session through e1: %v", err)
	}

	// The agents and the watcher run until the end of the rotation.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures, empties []string
	var agentOK, viaE3, strangerTries, strangerIn atomic.Int64
	var e1LeftDNS, e1LeftFW, e3InDNS, e3InFW time.Time
	wg.Add(2)
	go func() { // agents: resolve, then a full TLS + LDAP round trip
		defer wg.Done()
		for i := 0; ctx.Err() == nil && i < 5000; i++ {
			set, err := resolve()
			if err != nil {
				// A lost datagram is not what this test is about (an empty
				// answer is): log it, try again.
				t.Logf("resolve: %v", err)
				continue
			}
			if len(set) == 0 {
				mu.Lock()
				empties = append(empties, fmt.Sprintf("%v", set))
				mu.Unlock()
				continue
			}
			addr := set[i%len(set)] + ":636"
			var res probe.Result
			agent.Do(func() error { res = probe.Probe(context.Background(), addr, agentTLS, 5*time.Second); return nil })
			if !res.OK {
				mu.Lock()
				failures = append(failures, res.Error)
				mu.Unlock()
			} else {
				agentOK.Add(1)
				if strings.HasPrefix(addr, edges["e3"]+":") {
					viaE3.Add(1)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() { // the watcher: DNS and firewall of e1 and e3, and a stranger
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			set, _ := resolve()
			rules, _ := orig.Try("iptables", "-S")
			now := time.Now()
			has := func(ip string) bool { return strings.Contains(rules, "-s "+ip+"/32") }
			inDNS := func(ip string) bool { return strings.Contains(" "+strings.Join(set, " ")+" ", " "+ip+" ") }
			mu.Lock()
			if e1LeftDNS.IsZero() && len(set) > 0 && !inDNS(edges["e1"]) {
				e1LeftDNS = now
			}
			if e1LeftFW.IsZero() && strings.Contains(rules, "EDGEFLEET") && !has(edges["e1"]) {
				e1LeftFW = now
			}
			if e3InDNS.IsZero() && inDNS(edges["e3"]) {
				e3InDNS = now
			}
			if e3InFW.IsZero() && has(edges["e3"]) {
				e3InFW = now
			}
			mu.Unlock()
			if i%10 == 0 {
				strangerTries.Add(1)
				if c, err := agent.Dial("", origIP+":8636", 300*time.Millisecond); err == nil {
					c.Close()
					strangerIn.Add(1)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	// A dry run changes nothing, fleet.yaml included.
	before, _ := os.ReadFile(inv)
	r = fleetRun(t, orig, "--config", inv, "rotate", "--chain", "INPUT", "--out", "e1", "--in", "e3="+edges["e3"]+",fd77::13", "--dry-run")
	if after, _ := os.ReadFile(inv); r.code != 0 || string(after) != string(before) || !strings.Contains(r.stdout, "step 4/6 dns: would remove A "+edges["e1"]+" (e1)") ||
		!strings.Contains(r.stdout, "  + -A EDGEFLEET -s "+edges["e3"]+"/32 -i eth0 -p tcp") {
		t.Fatalf("rotate --dry-run: exit %d\n%s%s\nfleet.yaml:\n%s", r.code, r.stdout, r.stderr, after)
	}
	t.Logf("fleet rotate --dry-run:\n%s", r.stdout)

	// A firewall watch runs throughout: it must never undo the rotation
	// (drop e3 before fleet.yaml lists it, or e1 while it drains).
	watch := startFleet(t, orig, "--config", inv, "firewall", "--chain", "INPUT", "watch", "--interval", "200ms")
	args := []string{"--config", inv, "rotate", "--chain", "INPUT", "--out", "e1", "--in", "e3=" + edges["e3"] + ",fd77::13", "--slack", "1s", "--progress", "200ms"}
	// First run: killed in the middle of the TTL wait.
	first := startFleet(t, orig, args...)
	first.waitLine(t, "step 5/6 wait: e1 left DNS")
	first.cmd.Process.Kill()
	first.cmd.Wait()
	t.Logf("first rotate, killed in the TTL wait:\n%s", first.output())
	if b, err := os.ReadFile(filepath.Join(dir, deploy.StateFile)); err != nil || !strings.Contains(string(b), `"state": "draining"`) {
		t.Errorf("state file after the kill: %v\n%s", err, b)
	} else {
		t.Logf("%s after the kill:\n%s", deploy.StateFile, b)
	}

	// Second run: resumes; e1's session is used, then closed, while it drains.
	second := startFleet(t, orig, args...)
	second.waitLine(t, "step 5/6 drain: e1 has ") // 1 (the session) or more active connections
	// Another convergence of the same inventory meanwhile is refused.
	oneLineFailure(t, "apply during rotate", fleetRun(t, orig, "--config", inv, "apply", "--chain", "INPUT"), 1, "is running on this inventory")
	if _, err := sess.WhoAmI(nil); err != nil {
		t.Errorf("e1's session broke while e1 drained: %v", err)
	}
	sessClosed := time.Now()
	sess.Close()
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("second rotate: %v\n%s", err, second.output())
	}
	out2 := second.output()
	t.Logf("second rotate:\n%s", out2)
	time.Sleep(500 * time.Millisecond) // the watchers see the last change
	stop()
	wg.Wait()
	watch.cmd.Process.Signal(syscall.SIGTERM)
	watch.cmd.Wait()
	t.Logf("firewall watch during the rotation:\n%s", watch.output())

	mu.Lock()
	defer mu.Unlock()
	t.Logf("agents: %d connections (%d through e3), %d failed, %d empty answers; stranger: %d tries, %d let in; e1 left DNS %v before the firewall",
		agentOK.Load(), viaE3.Load(), len(failures), len(empties), strangerTries.Load(), strangerIn.Load(), e1LeftFW.Sub(e1LeftDNS).Round(time.Millisecond))
	if len(empties) > 0 {
		t.Errorf("the name resolved to an empty set %d times", len(empties))
	}
	if len(failures) > 0 {
		t.Errorf("%d agent connections failed, first: %s", len(failures), failures[0])
	}
	if agentOK.Load() == 0 || viaE3.Load() == 0 {
		t.Errorf("agents: %d connections, %d through e3", agentOK.Load(), viaE3.Load())
	}
	if strangerTries.Load() == 0 || strangerIn.Load() > 0 {
		t.Errorf("a stranger got in %d times of %d", strangerIn.Load(), strangerTries.Load())
	}
	switch {
	case e1LeftDNS.IsZero() || e1LeftFW.IsZero():
		t.Errorf("e1 left DNS at %v and the firewall at %v", e1LeftDNS, e1LeftFW)
	case !e1LeftDNS.Before(e1LeftFW):
		t.Errorf("e1 left the firewall (%v) before DNS (%v)", e1LeftFW, e1LeftDNS)
	case e1LeftFW.Before(sessClosed):
		t.Errorf("e1 left the firewall (%v) before its session closed (%v)", e1LeftFW, sessClosed)
	}
	if e3InFW.IsZero() || e3InDNS.IsZero() || e3InDNS.Before(e3InFW) {
		t.Errorf("e3 entered the firewall at %v and DNS at %v", e3InFW, e3InDNS)
	}
	for _, want := range []string{"fleet.yaml already lists e3=" + edges["e3"] + ",fd77::13 instead of e1: resuming", "resuming: e1 left DNS at", "step 5/6 drain: e1 has no active connection", "step 6/6 firewall: applied, allowing e3 e2"} {
		if !strings.Contains(out2, want) {
			t.Errorf("second rotate does not say %q", want)
		}
	}
	if strings.Contains(out2, "step 3/6 dns: add") || strings.Contains(out2, "step 2/6 probe") {
		t.Errorf("the resumed rotate probed or published again")
	}

	// The end state.
	set, _ := resolve()
	if strings.Join(set, " ") != edges["e2"]+" "+edges["e3"] && strings.Join(set, " ") != edges["e3"]+" "+edges["e2"] {
		t.Errorf("DNS answers %q, want e2 and e3", set)
	}
	rules := orig.Run("iptables", "-S")
	if strings.Contains(rules, edges["e1"]) || !strings.Contains(rules, edges["e3"]) {
		t.Errorf("firewall after the rotation:\n%s", rules)
	}
	// e3's IPv6 address: published, allowed by ip6tables, probed.
	if rules6 := orig.Run("ip6tables", "-S"); !strings.Contains(rules6, "-s fd77::13/128") {
		t.Errorf("ip6tables after the rotation:\n%s", rules6)
	}
	if out := named.Dig(t, "+short", "ldap.example.test", "AAAA"); strings.TrimSpace(out) != "fd77::13" {
		t.Errorf("AAAA after the rotation: %q", out)
	}
	if out1 := first.output(); !strings.Contains(out1, "step 2/6 probe: e3 [fd77::13]:636 ok") || !strings.Contains(out1, "step 3/6 dns: add AAAA fd77::13 (e3), read back") {
		t.Errorf("the rotation did not probe and publish e3's IPv6 address:\n%s", out1)
	}
	yml, _ := os.ReadFile(inv)
	if strings.Contains(string(yml), "e1") || !strings.Contains(string(yml), "name: e3") || !strings.Contains(string(yml), "# the rotation test's fleet") {
		t.Errorf("fleet.yaml after the rotation:\n%s", yml)
	}
	st, err := deploy.LoadState(filepath.Join(dir, deploy.StateFile))
	if err != nil || st.Edges["e1"] != nil || st.Edges["e3"] == nil || st.Edges["e3"].State != deploy.StateActive {
		t.Errorf("state after the rotation: %v\n%s", err, st.Marshal())
	}
	// A rerun has nothing to do.
	r = fleetRun(t, orig, "--config", inv, "apply", "--chain", "INPUT")
	if r.code != 0 || strings.Contains(r.stdout, "applied") || strings.Contains(r.stdout, "read back") {
		t.Errorf("apply after the rotation: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = fleetRun(t, orig, "--config", inv, "status", "--chain", "INPUT")
	t.Logf("fleet status:\n%s", r.stdout)
	rows := map[string][]string{}
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = f
		}
	}
	for _, e := range []string{"e2", "e3"} {
		f := rows[e]
		addr := edges[e]
		if e == "e3" {
			addr += ",fd77::13"
		}
		if r.code != 0 || len(f) < 7 || f[1] != addr || f[2] != "yes" || f[3] != "yes" || f[5] != "ms" || f[len(f)-1] != "active" {
			t.Errorf("status row of %s: %q\n%s%s", e, f, r.stdout, r.stderr)
		}
	}
	if _, ok := rows["e1"]; ok {
		t.Errorf("status still lists e1:\n%s", r.stdout)
	}

	// Removing an edge, with the state file moved away (a fresh
	// checkout): e2 leaves fleet.yaml; apply still removes it in the safe
	// order — DNS, the TTL wait, its drain (drain_timeout: the state that
	// knew its metrics is gone), then the firewall.
	os.Rename(filepath.Join(dir, deploy.StateFile), filepath.Join(dir, "moved-away.json"))
	head, _, _ := strings.Cut(string(yml), "edges:")
	os.WriteFile(inv, []byte(head+"edges:\n  - {name: e3, ipv4: "+edges["e3"]+", ipv6: \"fd77::13\"}\n"), 0o600)
	r = fleetRun(t, orig, "--config", inv, "apply", "--chain", "INPUT", "--slack", "1s", "--progress", "1s")
	t.Logf("fleet apply without e2 and without a state file:\n%s", r.stdout)
	out := r.stdout
	dnsAt := strings.Index(out, "step 4/6 dns: remove A "+edges["e2"]+" (e2), read back")
	waitAt := strings.Index(out, "step 5/6 wait: e2 left DNS")
	drainAt := strings.Index(out, "step 5/6 drain: e2")
	fwAt := strings.Index(out, "step 6/6 firewall: applied, allowing e3\n")
	if r.code != 0 || strings.Contains(out, "step 1/6 firewall: applied") || dnsAt < 0 || waitAt < dnsAt || drainAt < waitAt || fwAt < drainAt {
		t.Errorf("removing e2 without a state: exit %d, not DNS, wait, drain, firewall in that order\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Adding an edge: e1 comes back.
	os.WriteFile(inv, []byte(head+"edges:\n  - {name: e3, ipv4: "+edges["e3"]+", ipv6: \"fd77::13\"}\n  - {name: e1, ipv4: "+edges["e1"]+", metrics: \""+edges["e1"]+":9101\"}\n"), 0o600)
	r = fleetRun(t, orig, "--config", inv, "apply", "--chain", "INPUT")
	t.Logf("fleet apply with e1 added:\n%s", r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "step 2/6 probe: e1 "+edges["e1"]+":636 ok") || !strings.Contains(r.stdout, "step 3/6 dns: add A "+edges["e1"]+" (e1), read back") {
		t.Errorf("adding e1: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if set, _ := resolve(); len(set) != 2 { // A records: e1 and e3
		t.Errorf("after adding e1, DNS answers %q", set)
	}
	r = fleetRun(t, orig, "--config", inv, "status", "--chain", "INPUT")
	t.Logf("fleet status:\n%s", r.stdout)

	// A typo in origin.interface is refused before anything changes; a
	// wrong origin.address (no edge's connection matches it) is caught by
	// the probes after the change and the previous rules come back.
	cur, _ := os.ReadFile(inv)
	rulesBefore := orig.Run("iptables", "-S")
	os.WriteFile(inv, []byte(strings.Replace(string(cur), "interface: eth0}", "interface: eth9}", 1)), 0o600)
	oneLineFailure(t, "interface typo", fleetRun(t, orig, "--config", inv, "apply", "--chain", "INPUT"), 1, `origin.interface: no interface "eth9" on this host`)
	if got := orig.Run("iptables", "-S"); got != rulesBefore {
		t.Errorf("a refused interface changed the rules:\n%s", got)
	}
	os.WriteFile(inv, []byte(strings.Replace(string(cur), "interface: eth0}", "interface: eth0, address: 10.77.0.99}", 1)), 0o600)
	r = fleetRun(t, orig, "--config", inv, "apply", "--chain", "INPUT")
	t.Logf("apply with a wrong origin.address:\n%s%s", r.stdout, r.stderr)
	oneLineFailure(t, "wrong address", r, 1, "firewall change broke a working edge")
	if got := orig.Run("iptables", "-S"); strings.Contains(got, "10.77.0.99") || !strings.Contains(got, "-s "+edges["e3"]+"/32") {
		t.Errorf("the previous rules are not back:\n%s", got)
	}
	r = fleetRun(t, orig, "--config", inv, "firewall", "--chain", "INPUT", "apply")
	oneLineFailure(t, "firewall apply with a wrong address", r, 1, "firewall change broke a working edge")
	if got := orig.Run("iptables", "-S"); strings.Contains(got, "10.77.0.99") || !strings.Contains(got, "-s "+edges["e3"]+"/32") {
		t.Errorf("fleet firewall apply did not restore the previous rules:\n%s", got)
	}
	os.WriteFile(inv, cur, 0o600)
	var res probe.Result
	agent.Do(func() error {
		res = probe.Probe(context.Background(), edges["e3"]+":636", agentTLS, 5*time.Second)
		return nil
	})
	if !res.OK {
		t.Errorf("e3 after the restore: %s", res.Error)
	}

	// A TTL lowered just before a removal (the usual preparation): ttl 8,
	// then 2, then e1 leaves. A resolver that fetched the TTL-8 records
	// just before they were replaced holds them 8 s: e1 stays allowed
	// until then (plus slack), not 2 s after it left DNS.
	withTTL := func(ttl string, b []byte) []byte {
		return []byte(strings.Replace(string(b), "ttl: 3\n", "ttl: "+ttl+"\n", 1))
	}
	os.WriteFile(inv, withTTL("8", cur), 0o600)
	if r := fleetRun(t, orig, "--config", inv, "apply", "--chain", "INPUT"); r.code != 0 || !strings.Contains(r.stdout, "ttl A -> 8") {
		t.Fatalf("ttl 8: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	lowered := time.Now() // no later than the TTL-2 rewrite
	os.WriteFile(inv, withTTL("2", cur), 0o600)
	if r := fleetRun(t, orig, "--config", inv, "apply", "--chain", "INPUT"); r.code != 0 || !strings.Contains(r.stdout, "ttl A -> 2") {
		t.Fatalf("ttl 2: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	head, _, _ = strings.Cut(string(withTTL("2", cur)), "edges:")
	os.WriteFile(inv, []byte(head+"edges:\n  - {name: e3, ipv4: "+edges["e3"]+", ipv6: \"fd77::13\"}\n"), 0o600)
	r = fleetRun(t, orig, "--config", inv, "apply", "--chain", "INPUT", "--slack", "1s", "--progress", "1s")
	dropped := time.Now() // no earlier than e1's drop
	t.Logf("apply removing e1 after the TTL went 8 -> 2:\n%s", r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "(the TTL 8s its records had until ") || !strings.Contains(r.stdout, "step 6/6 firewall: applied, allowing e3\n") {
		t.Errorf("removal after a lowered TTL: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if held := lowered.Add(8*time.Second + time.Second); dropped.Before(held) {
		t.Errorf("e1 left the firewall by %v, before the TTL-8 copies (fetched up to %v) expired at %v", dropped, lowered, held)
	}
}

// fleetProc is a fleet run in the background whose output is read line by
// line.
type fleetProc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	seen  chan string
}

func startFleet(t *testing.T, ns *testbed.Netns, args ...string) *fleetProc {
	t.Helper()
	p := &fleetProc{cmd: ns.Command(fleetBin(t), args...), seen: make(chan string, 1000)}
	pr, pw, _ := os.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			select {
			case p.seen <- sc.Text():
			default:
			}
		}
		close(p.seen)
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

// waitLine waits for a line containing s.
func (p *fleetProc) waitLine(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-p.seen:
			if !ok {
				t.Fatalf("fleet ended without printing %q:\n%s", s, p.output())
			}
			if strings.Contains(l, s) {
				return
			}
		case <-timeout:
			t.Fatalf("fleet did not print %q within 60s:\n%s", s, p.output())
		}
	}
}

func (p *fleetProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}
