package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/edgefleet/edgefleet/deploy"
	"github.com/edgefleet/edgefleet/deploy/monitoring"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
	"github.com/edgefleet/edgefleet/probe"
)

// TestWatchEndToEnd runs fleet watch on a LAN of network namespaces: the
// origin host (front, core, slapd, the INPUT firewall, fleet), three edges
// (cmd/edge), an agent loop resolving the name at BIND 9 (TSIG updates).
// e3 is stopped (SIGSTOP): it is withdrawn after fall failed checks, DNS
// first; the watch is killed -9 in the middle of the withdrawal and
// started again, and the end state is right (e3 out of DNS and, after its
// wait, out of the origin's INPUT firewall; still in fleet.yaml). A
// recheck lets it in, fails and drops it again; fleet firewall check,
// firewall apply, apply and firewall watch leave it out; the watch killed -9 while e3 is
// out of the firewall and restarted keeps it out. No agent
// operation fails once e3 is out of DNS for one TTL. e3 continued
// (SIGCONT) is let in by its next recheck and restored after rise passed
// checks (probe, then DNS). With every edge
// stopped none is withdrawn and edgefleet_fleet_all_edges_failing is 1.
// A failing replace hook is retried with back-off, fleet.yaml unchanged;
// a hook that starts e4 and prints its JSON gets e4 published and e3
// rotated out of fleet.yaml (and, after its wait, the firewall). An
// operator's fleet rotate during the watch works and is not undone.
func TestWatchEndToEnd(t *testing.T) {
	testbed.NeedRoot(t)
	testbed.Need(t, "iptables", "named", "slapd")
	lan := testbed.NewNetns(t, "lan")
	lan.Run("ip", "link", "add", "br0", "type", "bridge")
	lan.Run("ip", "addr", "add", "10.77.0.53/24", "dev", "br0")
	lan.Run("ip", "link", "set", "br0", "up")
	orig, origIP := lanHost(t, lan, "orig", 1)
	agent, _ := lanHost(t, lan, "agent", 100)
	named := testbed.StartNamed(t, testbed.NamedConfig{Zone: "example.test", Netns: lan, IP: "10.77.0.53"})
	o := stack.StartOn(t, orig.Listen(origIP+":8636"), "10.77.0.0/24")

	edges := map[string]string{}
	procs := map[string]*testbed.Proc{}
	for i, name := range []string{"e1", "e2", "e3"} {
		ns, ip := lanHost(t, lan, name, 11+i)
		edges[name] = ip
		cfg := testbed.WriteFile(t, t.TempDir(), "edge.yaml", fmt.Sprintf(
			"name: %s\nlisten: [\"%s:636\"]\norigins: [\"%s:8636\"]\nmetrics: \"%s:9101\"\ndrain_timeout: 1s\n", name, ip, origIP, ip))
		procs[name] = testbed.StartCmd(t, ns.Command(edgeBin(t), "--config", cfg))
		waitNS(t, agent, ip+":636")
	}
	// e4's host exists from the start (a port added to the bridge later
	// may change its MAC address, and the origin's ARP entry for the DNS
	// server on it goes stale); the replace hook starts e4's edge.
	e4ns, e4ip := lanHost(t, lan, "e4", 14)
	e5ns, e5ip := lanHost(t, lan, "e5", 15)
	signal := func(sig syscall.Signal, names ...string) {
		for _, n := range names {
			if err := procs[n].Cmd.Process.Signal(sig); err != nil {
				t.Fatalf("%v %s: %v", sig, n, err)
			}
		}
	}
	t.Cleanup(func() { signal(syscall.SIGCONT, "e1", "e2", "e3") })

	dir := t.TempDir()
	testbed.WriteFile(t, dir, "fleet.key", named.KeySecret+"\n")
	inv := testbed.WriteFile(t, dir, "fleet.yaml", fmt.Sprintf(`name: ldap.example.test
zone: example.test
ttl: 1
drain_timeout: 2s
dns:
  server: "%s"
  tsig: {name: fleet-key, algorithm: hmac-sha256, secret_file: fleet.key}
origin: {ports: [8636], interface: eth0}
probe: {ca: %s, cert: %s, key: %s, server_name: %s, budget: 1s}
watch: {interval: 200ms, fall: 3, rise: 2, min_edges: 2}
edges:
  - {name: e1, ipv4: %s, metrics: "%s:9101"}
  - {name: e2, ipv4: %s, metrics: "%s:9101"}
  - {name: e3, ipv4: %s, metrics: "%s:9101"}
`, named.Addr, o.PKI.Path("ca.pem"), o.PKI.Path("agent.pem"), o.PKI.Path("agent.key"), testbed.ServerName,
		edges["e1"], edges["e1"], edges["e2"], edges["e2"], edges["e3"], edges["e3"]))
	if r := fleetRun(t, orig, "--config", inv, "apply", "--chain", "INPUT", "--slack", "0s"); r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	invBefore, _ := os.ReadFile(inv)

	resolve := func() []string {
		m := new(dns.Msg).SetQuestion("ldap.example.test.", dns.TypeA)
		var out []string
		agent.Do(func() error {
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
		return out
	}
	has := func(set []string, ip string) bool {
		return strings.Contains(" "+strings.Join(set, " ")+" ", " "+ip+" ")
	}
	inFW := func(ip string) bool { return strings.Contains(orig.Run("iptables", "-S"), "-s "+ip+"/32") }
	waitFor := func(what string, cond func() bool) time.Time {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second) // a hang guard only
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 90s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return time.Now()
	}
	scrape := func() string {
		var body string
		c, err := orig.Dial("", "127.0.0.1:9199", 2*time.Second)
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		defer c.Close()
		fmt.Fprint(c, "GET /metrics HTTP/1.0\r\nHost: fleet\r\n\r\n")
		b, _ := io.ReadAll(c)
		body = string(b)
		return body
	}

	// The agent loop: resolve, then a full TLS + LDAP round trip through
	// one of the answers; each failure with when its resolution was made.
	type op struct {
		at   time.Time
		addr string
		err  string
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var mu sync.Mutex
	var failed []op
	var ok int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		agentTLS := o.AgentTLS()
		for i := 0; ctx.Err() == nil; i++ {
			at := time.Now()
			set := resolve()
			if len(set) == 0 {
				continue
			}
			addr := set[i%len(set)] + ":636"
			var res probe.Result
			agent.Do(func() error { res = probe.Probe(context.Background(), addr, agentTLS, time.Second); return nil })
			mu.Lock()
			if res.OK {
				ok++
			} else {
				failed = append(failed, op{at, addr, res.Error})
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()

	args := []string{"--config", inv, "watch", "--chain", "INPUT", "--slack", "0s", "--progress", "200ms", "--metrics", "127.0.0.1:9199"}
	w1 := startFleet(t, orig, args...)
	w1.waitLine(t, "fleet watch started")

	// e3 stops answering: withdrawn after fall checks, DNS first.
	stopped := time.Now()
	signal(syscall.SIGSTOP, "e3")
	w1.waitLine(t, `msg=withdraw edge=e3 reason="3 failed checks"`)
	decided := time.Now()
	m := scrape()
	// Killed -9 as it withdraws (before, while or after it saves the
	// withdrawal and sends the UPDATE), then started again: the end state
	// is right whichever it was.
	w1.cmd.Process.Kill()
	w1.cmd.Wait()
	t.Logf("fleet watch (killed -9 as it withdrew e3):\n%s", w1.output())
	for _, want := range []string{`edgefleet_fleet_edge_healthy{edge="e3"} 0`, `edgefleet_fleet_edge_healthy{edge="e1"} 1`, "edgefleet_fleet_withdrawals_total 1", "edgefleet_fleet_all_edges_failing 0"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
	if n := regexp.MustCompile(`edgefleet_fleet_checks_total\{edge="e3",result="fail"\} (\d+)`).FindStringSubmatch(m); n == nil || n[1] < "3" {
		t.Errorf("e3's failed checks: %v", n)
	}
	for name, typ := range monitoring.Exported["fleet-watch"] {
		if !strings.Contains(m, "# TYPE "+name+" "+typ) {
			t.Errorf("/metrics lacks # TYPE %s %s", name, typ)
		}
	}
	w2 := startFleet(t, orig, args...)
	leftDNS := waitFor("e3 leaves DNS", func() bool { set := resolve(); return len(set) == 2 && !has(set, edges["e3"]) })
	t.Logf("e3 stopped → withdraw decided after %v → out of DNS after %v (fall 3, interval 200ms with full jitter, probe budget 1s; the watch killed -9 as it withdrew and restarted)",
		decided.Sub(stopped).Round(time.Millisecond), leftDNS.Sub(stopped).Round(time.Millisecond))
	if st := loadState(t, dir); st.Withdrawn["e3"].Reason == "" {
		t.Fatalf("state after the restart: %+v", st)
	}
	// After its wait (TTL 1s + slack 0s, then its drain, up to
	// drain_timeout 2s) e3 leaves the origin's firewall, by the state's
	// clock never before TTL + slack after it left DNS.
	out := func() bool { return !inFW(edges["e3"]) && loadState(t, dir).Withdrawn["e3"].Phase() == deploy.PhaseOut }
	droppedAt := waitFor("e3 leaves the firewall after its wait", out)
	wd := loadState(t, dir).Withdrawn["e3"]
	if wd.LeftDNS.IsZero() || wd.FirewalledOut.Sub(wd.LeftDNS) < time.Second {
		t.Fatalf("e3 out of the firewall: withdrawal %+v, want firewalled-out at least TTL 1s + slack 0s after it left DNS", wd)
	}
	t.Logf("e3 out of DNS → out of the firewall after %v (by the state: %v; TTL 1s + slack 0s, then its drain: drain_timeout 2s)",
		droppedAt.Sub(leftDNS).Round(time.Millisecond), wd.FirewalledOut.Sub(wd.LeftDNS).Round(time.Millisecond))
	if b, _ := os.ReadFile(inv); string(b) != string(invBefore) {
		t.Errorf("a withdrawal edited fleet.yaml:\n%s", b)
	}
	// Its recheck lets it in, probes it and, failed, drops it again, the
	// next one backed off.
	w2.waitLine(t, `msg=recheck edge=e3`)
	w2.waitLine(t, `msg=drop edge=e3 reason="failed its recheck"`)
	w2.waitLine(t, `the firewall allows e1 e2"`) // the drop's convergence done
	if after := w2.output()[strings.Index(w2.output(), "msg=recheck edge=e3"):]; !strings.Contains(after, "step 1/6 firewall: applied, allowing e1 e2 e3") {
		t.Errorf("the recheck did not let e3 in:\n%s", after)
	}
	waitFor("e3 leaves the firewall after its failed recheck", out)
	if wd := loadState(t, dir).Withdrawn["e3"]; wd.Phase() != deploy.PhaseOut || wd.FailedRechecks < 1 || !wd.NextCheck.After(wd.FirewalledOut) {
		t.Errorf("after a failed recheck: %+v", wd)
	}
	// Killed -9 while e3 is out of the firewall, then started again: e3
	// stays withdrawn and out of DNS; its next recheck, due by the state's
	// back-off, fails and drops it again.
	w2.cmd.Process.Kill()
	w2.cmd.Wait()
	t.Logf("fleet watch (killed -9 with e3 out of the firewall):\n%s", w2.output())
	// Meanwhile every command that writes the firewall computes the same
	// allowed set: none opens e3 again, apply does not publish it.
	for _, cmd := range [][]string{{"firewall", "check"}, {"firewall", "apply"}, {"apply"}} {
		r := fleetRun(t, orig, append([]string{"--config", inv}, append(cmd, "--chain", "INPUT")...)...)
		if r.code != 0 || inFW(edges["e3"]) || has(resolve(), edges["e3"]) {
			t.Errorf("fleet %s with e3 out of the firewall: exit %d, e3 let in %v, in DNS %v\n%s%s", strings.Join(cmd, " "), r.code, inFW(edges["e3"]), has(resolve(), edges["e3"]), r.stdout, r.stderr)
		}
	}
	fwWatch := startFleet(t, orig, "--config", inv, "firewall", "watch", "--chain", "INPUT", "--interval", "200ms")
	fwWatch.waitLine(t, "firewall watch started")
	time.Sleep(time.Second) // several of its rounds
	fwWatch.cmd.Process.Signal(syscall.SIGTERM)
	fwWatch.cmd.Wait()
	if out := fwWatch.output(); inFW(edges["e3"]) || strings.Contains(out, "firewall re-applied") {
		t.Errorf("fleet firewall watch let e3 in again or re-applied the rules:\n%s", out)
	}
	w2 = startFleet(t, orig, args...)
	w2.waitLine(t, `msg=drop edge=e3 reason="failed its recheck"`)
	waitFor("e3 out of the firewall after the restart", out)
	if set := resolve(); has(set, edges["e3"]) || len(set) != 2 {
		t.Errorf("DNS after the restart: %v", set)
	}
	if wd := loadState(t, dir).Withdrawn["e3"]; wd.Phase() != deploy.PhaseOut || wd.FailedRechecks < 2 {
		t.Errorf("after the restart: %+v", wd)
	}

	// e3 continues: its next recheck lets it in, rise passed checks
	// restore it (the firewall first, probe, then DNS).
	signal(syscall.SIGCONT, "e3")
	w2.waitLine(t, `msg=recheck edge=e3`)
	w2.waitLine(t, `msg=restore edge=e3 reason="2 passed checks"`)
	w2.waitLine(t, "step 2/6 probe: e3 "+edges["e3"]+":636 ok")
	w2.waitLine(t, "step 3/6 dns: add A "+edges["e3"])
	if !inFW(edges["e3"]) {
		t.Errorf("the restored e3 is not let in by the firewall")
	}
	backDNS := waitFor("e3 back in DNS", func() bool { return has(resolve(), edges["e3"]) })
	if m := scrape(); !strings.Contains(m, "edgefleet_fleet_restorations_total 1") {
		t.Errorf("restorations not counted:\n%s", m)
	}

	stop()
	wg.Wait()
	mu.Lock()
	var late []op
	var before int
	for _, f := range failed {
		if f.at.After(leftDNS.Add(time.Second)) && f.at.Before(backDNS) {
			late = append(late, f)
		} else {
			before++
		}
	}
	t.Logf("agents: %d operations ok, %d failed while e3 was stopped and published (or in its TTL), %d after e3 left DNS for one TTL", ok, before, len(late))
	if len(late) > 0 {
		t.Errorf("%d agent operations failed after e3 left DNS for one TTL, first: %+v", len(late), late[0])
	}
	mu.Unlock()

	// Every edge stops: none is withdrawn, the alert metric is set.
	signal(syscall.SIGSTOP, "e1", "e2", "e3")
	w2.waitLine(t, "all edges failing: nothing withdrawn, the origin is the likely fault")
	for range 3 { // more than fall rounds, all failing
		w2.waitLine(t, "all edges failing")
	}
	if m := scrape(); !strings.Contains(m, "edgefleet_fleet_all_edges_failing 1") {
		t.Errorf("all_edges_failing not set:\n%s", m)
	}
	if set := resolve(); len(set) != 3 {
		t.Errorf("DNS answers %v with every edge failing, want all three", set)
	}
	if st, _ := deploy.LoadState(filepath.Join(dir, deploy.StateFile)); len(st.Withdrawn) > 0 {
		t.Errorf("withdrawn with every edge failing: %v", st.Withdrawn)
	}
	signal(syscall.SIGCONT, "e1", "e2", "e3")
	w2.cmd.Process.Signal(syscall.SIGTERM)
	w2.cmd.Wait()
	t.Logf("fleet watch (restarted):\n%s", w2.output())

	// The replace hook. A failing one first: retried with back-off,
	// fleet.yaml unchanged.
	calls := filepath.Join(dir, "hook-calls")
	failing := testbed.WriteFile(t, dir, "failing-hook.sh", "echo \"$1\" >>"+calls+"\necho 'no capacity in this region' >&2\nexit 3\n")
	withHook := func(hook string) []byte {
		b := strings.Replace(string(invBefore), "watch: {interval: 200ms, fall: 3, rise: 2, min_edges: 2}",
			"watch: {interval: 200ms, fall: 3, rise: 2, min_edges: 2, replace: {command: \"sh "+hook+"\", timeout: 20s}}", 1)
		testbed.WriteFile(t, dir, "fleet.yaml", b)
		return []byte(b)
	}
	hooked := withHook(failing)
	w3 := startFleet(t, orig, append(args, "--replace-backoff", "200ms")...)
	w3.waitLine(t, "fleet watch started")
	signal(syscall.SIGSTOP, "e3")
	w3.waitLine(t, `msg=withdraw edge=e3`)
	for _, d := range []string{"200ms", "400ms", "800ms"} {
		w3.waitLine(t, `msg=replace edge=e3 result=fail err="watch.replace.command: exit status 3 (stderr: \"no capacity in this region\")" failures=`)
		if !strings.Contains(w3.output(), "retry_in="+d) {
			t.Errorf("no retry after %s:\n%s", d, w3.output())
		}
	}
	if b, _ := os.ReadFile(inv); string(b) != string(hooked) {
		t.Errorf("a failing hook edited fleet.yaml:\n%s", b)
	}
	if b, _ := os.ReadFile(calls); strings.Count(string(b), "e3\n") < 3 {
		t.Errorf("the hook was called %q, want e3 three times or more", b)
	}
	if m := scrape(); !regexp.MustCompile(`edgefleet_fleet_replacements_total\{result="fail"\} [3-9]`).MatchString(m) {
		t.Errorf("failed replacements not counted:\n%s", m)
	}

	// A hook that starts a new edge (e4) and prints its JSON: e4 is
	// published and e3 rotated out of fleet.yaml.
	e4cfg := testbed.WriteFile(t, t.TempDir(), "edge.yaml", fmt.Sprintf(
		"name: e4\nlisten: [\"%s:636\"]\norigins: [\"%s:8636\"]\nmetrics: \"%s:9101\"\ndrain_timeout: 1s\n", e4ip, origIP, e4ip))
	pidfile := filepath.Join(dir, "e4.pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidfile); err == nil {
			exec.Command("kill", strings.TrimSpace(string(b))).Run()
		}
	})
	good := testbed.WriteFile(t, dir, "good-hook.sh", fmt.Sprintf(`ip netns exec %s %s --config %s >%s 2>&1 &
echo $! >%s
for i in $(seq 1 100); do ip netns exec %s ss -ltn | grep -q '%s:636' && break; sleep 0.1; done
echo '{"name": "e4", "ipv4": "%s", "ipv6": "", "ssh": "", "host_key": ""}'
`, e4ns.Name, edgeBin(t), e4cfg, filepath.Join(dir, "e4.log"), pidfile, e4ns.Name, e4ip, e4ip))
	withHook(good)
	w3.waitLine(t, `msg=replace edge=e3 result=ok target="e4=`+e4ip+`"`)
	b, _ := os.ReadFile(inv)
	if strings.Contains(string(b), "name: e3") || !strings.Contains(string(b), "name: e4") || !strings.Contains(string(b), e4ip) {
		t.Errorf("fleet.yaml after the replacement:\n%s", b)
	}
	if set := resolve(); !has(set, e4ip) || has(set, edges["e3"]) || len(set) != 3 {
		t.Errorf("DNS after the replacement: %v", set)
	}
	waitFor("e3 leaves the firewall after its wait", func() bool { return !inFW(edges["e3"]) && inFW(e4ip) })
	if st, _ := deploy.LoadState(filepath.Join(dir, deploy.StateFile)); len(st.Withdrawn) > 0 {
		t.Errorf("withdrawals left after the replacement: %v", st.Withdrawn)
	}

	// An operator's rotation while the watch runs (e4 → e5) works, and
	// the watch's next rounds do not undo it.
	e5cfg := testbed.WriteFile(t, t.TempDir(), "edge.yaml", fmt.Sprintf(
		"name: e5\nlisten: [\"%s:636\"]\norigins: [\"%s:8636\"]\nmetrics: \"%s:9101\"\ndrain_timeout: 1s\n", e5ip, origIP, e5ip))
	testbed.StartCmd(t, e5ns.Command(edgeBin(t), "--config", e5cfg))
	waitNS(t, agent, e5ip+":636")
	if r := fleetRun(t, orig, "--config", inv, "rotate", "--chain", "INPUT", "--out", "e4", "--in", "e5="+e5ip, "--slack", "0s"); r.code != 0 {
		t.Fatalf("rotate during the watch: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	logged := len(w3.output())
	time.Sleep(2 * time.Second) // several rounds of the watch
	if b, _ := os.ReadFile(inv); strings.Contains(string(b), "name: e4") || !strings.Contains(string(b), "name: e5") {
		t.Errorf("fleet.yaml after the rotation during the watch:\n%s", b)
	}
	if set := resolve(); !has(set, e5ip) || has(set, e4ip) || len(set) != 3 {
		t.Errorf("DNS after the rotation during the watch: %v", set)
	}
	// A round may converge and find everything in sync; a change is a
	// withdrawal, a DNS add or remove, or a firewall drop.
	if later := w3.output()[logged:]; strings.Contains(later, "msg=withdraw") || strings.Contains(later, "dns: add") ||
		strings.Contains(later, "dns: remove") || strings.Contains(later, "step 6/6") {
		t.Errorf("the watch changed the fleet after the rotation:\n%s", later)
	}
	w3.cmd.Process.Signal(syscall.SIGTERM)
	w3.cmd.Wait()
	t.Logf("fleet watch with the replace hook and a rotation:\n%s", w3.output())
}

func loadState(t *testing.T, dir string) *deploy.State {
	t.Helper()
	st, err := deploy.LoadState(filepath.Join(dir, deploy.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestWatchUnitVerify: systemd-analyze verify accepts the fleet watch unit
// docs/watch.md gives (in a private mount namespace where a stand-in sits
// at its ExecStart path, so nothing is written to the machine's /usr).
func TestWatchUnitVerify(t *testing.T) {
	testbed.NeedRoot(t)
	testbed.Need(t, "systemd-analyze", "unshare")
	doc := testbed.Doc(t, "docs/watch.md")
	_, rest, ok := strings.Cut(doc, "```ini\n")
	unit, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 || !strings.Contains(unit, "ExecStart=/usr/local/bin/fleet ") || !strings.Contains(unit, " watch ") {
		t.Fatalf("docs/watch.md: no ```ini unit running fleet watch")
	}
	path := testbed.WriteFile(t, t.TempDir(), "fleet-watch.service", unit)
	script := "mount -t tmpfs tmpfs /usr/local/bin && cp /bin/true /usr/local/bin/fleet && exec systemd-analyze verify " + path
	out, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
