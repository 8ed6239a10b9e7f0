package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/go-ldap/ldap/v3"
)

// The LAN of TestEndToEnd: one bridge, every host a namespace on it.
const (
	lanNet   = "198.18.0." // RFC 2544 benchmarking range: never a real network
	originIP = lanNet + "1"
	edgeAIP  = lanNet + "2" // near edge, rotated out
	edgeBIP  = lanNet + "3" // far edge: 80 ms more to the origin
	edgeCIP  = lanNet + "4" // near edge, rotated in
	agentIP  = lanNet + "10"
	dnsIP    = lanNet + "53"
	front    = originIP + ":8636"
	edgePort = 636
	farRTT   = 80 * time.Millisecond
)

// TestEndToEnd is the whole fleet in network namespaces on one LAN: three
// slapd directories, the origin binary (front + core with mTLS) and the
// firewall (fleet's INPUT chain rules, real iptables) in the origin's
// namespace; our edge binaries, each dialing the origin from its own
// address; BIND 9 publishing the name; an agent in its own namespace with
// a probe.Dialer and a probe.Watcher keeping one LDAP session and issuing
// a read and a write in turn. While it runs, the agent's edge is rotated
// out (fleet rotate) and the directory in use is killed with an operation
// in flight. Then: no read failed; no write is in two directories; every
// write that succeeded is in one; the agent ended on the better of the two
// edges left; every operation's core line has claimed (the agent) and
// measured (an edge); the firewall lets the new edge in and keeps the
// rotated one and the agent out. Every wait is bounded; the test takes
// about 15 s.
func TestEndToEnd(t *testing.T) {
	testbed.NeedRoot(t)
	testbed.Need(t, "ip", "iptables", "ip6tables", "slapd", "slapadd", "named")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := buildBinaries(t)
	dir := t.TempDir()

	lan, host := newLAN(t, "lan", dnsIP)
	originNs := host("origin", originIP)
	edgesNs := host("edges", edgeAIP, edgeBIP, edgeCIP)
	agentNs := host("agent", agentIP)

	// The origin: three directories, the core routing alice's operations
	// to the first one alive (failover), the front trusting the edges.
	slapds := testbed.StartSlapds(t, 3, testbed.SlapdConfig{Netns: originNs})
	pki := testbed.NewPKI(t)
	dlp := fmt.Sprintf(`[
  {"object": "Defaults", "ConnectTimeout": 2, "OfflineRetryTimeout": 60},
  {"object": "LdapServer", "name": "L1", "host": "127.0.0.1", "port": %s},
  {"object": "LdapServer", "name": "L2", "host": "127.0.0.1", "port": %s},
  {"object": "LdapServer", "name": "L3", "host": "127.0.0.1", "port": %s},
  {"object": "ProxyRule", "ruleType": "UserRouting", "name": "PEOPLE",
   "condition": "(user:node=ou=people,%s)", "actions": ["forwardto(L1,L2,L3)"], "loadbalance": 0, "failover": 1},
  {"object": "LdapProxy", "name": "ldapConfiguration", "rules": ["PEOPLE"], "default": ["L1", "L2", "L3"]}
]`, port(slapds[0].Addr), port(slapds[1].Addr), port(slapds[2].Addr), testbed.Suffix)
	dlpFile := testbed.WriteFile(t, dir, "ldap_proxy.json", dlp)
	originCfg := testbed.WriteFile(t, dir, "origin.yaml", `front:
  listen: ["`+front+`"]
  inner: 127.0.0.1:1636
  trusted_edges: ["`+edgeAIP+`", "`+edgeBIP+`", "`+edgeCIP+`"]
peers_api: 127.0.0.1:9103
metrics: 127.0.0.1:9102
log:
  format: json
core:
  listen: 127.0.0.1:1636
  config: `+dlpFile+`
  tls:
    mode: mtls
    cert: `+pki.Path("server.pem")+`
    key: `+pki.Path("server.key")+`
    client_ca: `+pki.Path("ca.pem")+`
`)
	origin := testbed.StartCmd(t, originNs.Command(filepath.Join(bin, "origin"), "--config", originCfg))
	waitIn(t, originNs, front, origin)

	// The edges: a and c near, b far (a relay adding farRTT between it and
	// the origin, dialing from b's address); each dials from its own address.
	startEdge := func(name, ip, originAddr string) *testbed.Proc {
		cfg := testbed.WriteFile(t, dir, name+".yaml", fmt.Sprintf(`name: %s
listen: ["%s:%d"]
origins: ["%s"]
source: %s
metrics: %s:9101
drain_timeout: 2s
log:
  format: json
`, name, ip, edgePort, originAddr, ip, ip))
		p := testbed.StartCmd(t, edgesNs.Command(filepath.Join(bin, "edge"), "--config", cfg))
		waitIn(t, edgesNs, net.JoinHostPort(ip, strconv.Itoa(edgePort)), p)
		return p
	}
	startEdge("edge-a", edgeAIP, front)
	far := testbed.DelayIn(t, edgesNs, edgeBIP+":8637", edgeBIP, front, farRTT)
	startEdge("edge-b", edgeBIP, far)
	startEdge("edge-c", edgeCIP, front)

	// DNS: BIND 9 on the LAN; fleet publishes a and b and lets them in.
	named := testbed.StartNamed(t, testbed.NamedConfig{Zone: "edgefleet.test", IP: dnsIP, Netns: lan, Names: []string{testbed.ServerName}})
	fleetCfg := testbed.WriteFile(t, dir, "fleet.yaml", fmt.Sprintf(`# the fleet of the end-to-end test
name: %s
zone: edgefleet.test
ttl: 1
drain_timeout: 20s
dns:
  server: "%s"
  tsig: {name: %s, algorithm: hmac-sha256, secret: "%s"}
origin:
  ports: [8636]
  interface: eth0
probe: {ca: %s, cert: %s, key: %s, port: %d, budget: 2s}
edges:
  - {name: edge-a, ipv4: %s, metrics: "%s:9101"}
  - {name: edge-b, ipv4: %s, metrics: "%s:9101"}
`, testbed.ServerName, named.Addr, named.KeyName, named.KeySecret, pki.Path("ca.pem"), pki.Path("agent.pem"), pki.Path("agent.key"),
		edgePort, edgeAIP, edgeAIP, edgeBIP, edgeBIP))
	fleet := func(args ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		cmd := originNs.Command(filepath.Join(bin, "fleet"), append([]string{"--config", fleetCfg}, args...)...)
		cmd = exec.CommandContext(cctx, cmd.Path, cmd.Args[1:]...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("fleet %s: %v\n%s\norigin log:\n%s", strings.Join(args, " "), err, out, origin.Output())
		}
		t.Logf("fleet %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	fleet("apply", "--chain", "INPUT", "--slack", "1s")
	if err := agentNs.Echo(agentIP, front, 700*time.Millisecond); !isTimeout(err) {
		t.Fatalf("the agent reaches the origin's port directly (err %v): the firewall should drop it", err)
	}

	// The agent.
	ag := startAgent(t, ctx, agentNs, agentConfig{
		Name: testbed.ServerName, Port: edgePort, DNS: named.Addr,
		CA: pki.Path("ca.pem"), Cert: pki.Path("agent.pem"), Key: pki.Path("agent.key"),
		State: filepath.Join(dir, "agent-edges.json"), Every: 40 * time.Millisecond,
		Interval: 500 * time.Millisecond, Max: 3 * time.Minute,
	})
	nearA, nearC := net.JoinHostPort(edgeAIP, strconv.Itoa(edgePort)), net.JoinHostPort(edgeCIP, strconv.Itoa(edgePort))
	ag.waitOps(t, "the first operations through edge-a", 20, func(r record) bool { return r.Edge == nearA })

	// Rotation: edge-c in, edge-a out. The watcher sees the set change and
	// moves the agent to the best edge left: c, not the far b.
	out := fleet("rotate", "--out", "edge-a", "--in", "edge-c="+edgeCIP, "--chain", "INPUT", "--slack", "1s", "--progress", "1s")
	for _, want := range []string{"step 2/6 probe: edge-c " + nearC + " ok", "step 4/6 dns: remove A " + edgeAIP + " (edge-a)", "step 5/6 drain: edge-a has no active connection", "step 6/6 firewall: applied"} {
		if !strings.Contains(out, want) {
			t.Errorf("fleet rotate lacks %q", want)
		}
	}
	ag.waitOps(t, "operations through edge-c after the rotation", 20, func(r record) bool { return r.Edge == nearC })

	// The directory in use dies under the session with an operation in
	// flight: frozen first (the request waits in its socket), then
	// killed. The core fails over: a read is replayed on the next
	// directory, a write is not (it fails, or it was never applied).
	killed := lastTarget(t, origin.Output())
	slapds[killed].Freeze()
	time.Sleep(300 * time.Millisecond) // several operation periods: one is in flight
	killedAt := ag.count()
	slapds[killed].Kill()
	ag.waitOps(t, fmt.Sprintf("operations after L%d was killed", killed+1), 30, func(r record) bool { return r.Seq > 0 })
	recs := ag.stop(t)

	// The firewall: c is in, a (rotated out) and the agent are not.
	if err := edgesNs.Echo(edgeAIP, front, 700*time.Millisecond); !isTimeout(err) {
		t.Errorf("edge-a's address still reaches the origin after the rotation (err %v)", err)
	}
	if c, err := edgesNs.Dial(edgeCIP, front, 5*time.Second); err != nil {
		t.Errorf("edge-c's address cannot reach the origin: %v", err)
	} else {
		c.Close()
	}

	// Reads, writes, sessions.
	var reads, failedReads, writes, okWrites int
	var sessions []string
	moved := false
	written := map[string]bool{} // dn → the agent saw success
	for i, r := range recs {
		switch r.Kind {
		case "read":
			reads++
			if !r.OK {
				failedReads++
				t.Errorf("read %d through %s failed: %s", r.Seq, r.Edge, r.Err)
			}
		case "write":
			writes++
			written[r.DN] = r.OK
			if r.OK {
				okWrites++
			} else {
				t.Logf("write %d through %s failed (allowed, it must then be applied at most once): %s", r.Seq, r.Edge, r.Err)
			}
		case "session":
			sessions = append(sessions, r.Edge)
		case "move":
			moved = moved || (r.From == nearA && r.Edge == nearC)
		case "error":
			t.Logf("record %d: a session ended: %s", i, r.Err)
		}
	}
	t.Logf("%d reads (%d failed), %d writes (%d succeeded), sessions %v; L1 killed after record %d", reads, failedReads, writes, okWrites, sessions, killedAt)
	if !moved {
		t.Errorf("no better-edge move from %s to %s: sessions %v", nearA, nearC, sessions)
	}
	if len(sessions) == 0 || sessions[0] != nearA || sessions[len(sessions)-1] != nearC {
		t.Errorf("sessions %v: want the first through edge-a %s and the last through edge-c %s (the better of b and c)", sessions, nearA, nearC)
	}

	// Each write is in at most one directory, and each that succeeded in
	// exactly one (the killed one comes back with its data to be counted).
	if err := slapds[killed].Start(); err != nil {
		t.Fatal(err)
	}
	in := map[string]int{}
	for i, s := range slapds {
		dns := writesIn(t, originNs, s.Addr)
		t.Logf("L%d holds %d of the writes", i+1, len(dns))
		for _, dn := range dns {
			in[dn]++
			if _, issued := written[dn]; !issued {
				t.Errorf("L%d holds %s, which the agent never wrote", i+1, dn)
			}
		}
	}
	for dn, ok := range written {
		switch n := in[dn]; {
		case n > 1:
			t.Errorf("%s is in %d directories: applied twice", dn, n)
		case ok && n == 0:
			t.Errorf("%s succeeded but is in no directory: lost without an error", dn)
		}
	}

	// Every operation's core line has claimed and measured; the agent's
	// claim its own address, measured the edge that carried it.
	var lines, agentLines int
	targets := map[string]int{} // alice's operations by directory
	var order []string          // and in order
	for _, l := range strings.Split(origin.Output(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "ldap op" {
			continue
		}
		lines++
		claimed, _ := m["claimed"].(string)
		measured, _ := m["measured"].(string)
		if claimed == "" || measured == "" {
			t.Errorf("core line without claimed or measured: %s", l)
			continue
		}
		if m["user"] == testbed.User("alice") {
			agentLines++
			target, _ := m["target"].(string)
			targets[target]++
			order = append(order, target)
			if h := hostPart(claimed); h != agentIP {
				t.Errorf("alice's operation claimed %s, want the agent %s: %s", claimed, agentIP, l)
			}
			if h := hostPart(measured); h != edgeAIP && h != edgeBIP && h != edgeCIP {
				t.Errorf("alice's operation measured %s, not an edge: %s", measured, l)
			}
		}
	}
	if agentLines < reads+writes {
		t.Errorf("%d core lines for alice, want at least one per read and write (%d)", agentLines, reads+writes)
	}
	t.Logf("%d core lines, %d of them alice's, by directory %v; L%d was killed", lines, agentLines, targets, killed+1)
	last := order[max(0, len(order)-10):]
	if slices.Contains(last, fmt.Sprintf("L%d", killed+1)) {
		t.Errorf("alice's last operations went to %v: want them on another directory than the killed L%d", last, killed+1)
	}
}

// newLAN makes a bridge in a namespace of its own (role) with the address
// ip, and host, which makes a host on it: a namespace with eth0 on the
// bridge and the addresses ips (/24).
func newLAN(t *testing.T, role, ip string) (lan *testbed.Netns, host func(role string, ips ...string) *testbed.Netns) {
	lan = testbed.NewNetns(t, role)
	lan.Run("ip", "link", "add", "br0", "type", "bridge")
	lan.Run("ip", "addr", "add", ip+"/24", "dev", "br0")
	lan.Run("ip", "link", "set", "br0", "up")
	return lan, func(role string, ips ...string) *testbed.Netns {
		ns := testbed.NewNetns(t, role)
		testbed.Veth(t, ns, "eth0", lan, "v-"+role)
		lan.Run("ip", "link", "set", "v-"+role, "master", "br0", "up")
		for _, ip := range ips {
			ns.Run("ip", "addr", "add", ip+"/24", "dev", "eth0")
		}
		ns.Run("ip", "link", "set", "eth0", "up")
		return ns
	}
}

// agentProc is the running agent and what it printed so far.
type agentProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	mu    sync.Mutex
	recs  []record
	errs  *testbed.Buffer
}

// startAgent runs the test binary as the agent inside ns.
func startAgent(t *testing.T, ctx context.Context, ns *testbed.Netns, cfg agentConfig) *agentProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(cfg)
	cmd := ns.Command(exe, "-test.run=^$")
	cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	cmd.Env = append(os.Environ(), agentEnv+"="+string(js))
	a := &agentProc{cmd: cmd, done: make(chan struct{}), errs: &testbed.Buffer{}}
	cmd.Stderr = a.errs
	if a.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(a.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r record
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				a.mu.Lock()
				a.recs = append(a.recs, r)
				a.mu.Unlock()
			}
		}
		cmd.Wait()
	}()
	t.Cleanup(func() {
		a.stdin.Close()
		select {
		case <-a.done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-a.done
		}
	})
	return a
}

// since is a copy of the records from index from on.
func (a *agentProc) since(from int) []record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.recs[from:])
}

func (a *agentProc) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.recs)
}

// waitOps waits until n operations matching ok have been recorded after
// this call, for at most a minute.
func (a *agentProc) waitOps(t *testing.T, what string, n int, ok func(record) bool) {
	t.Helper()
	a.waitRecords(t, what, a.count(), func(recs []record) bool {
		got := 0
		for _, r := range recs {
			if (r.Kind == "read" || r.Kind == "write") && ok(r) {
				got++
			}
		}
		return got >= n
	})
}

// waitRecords waits until cond holds for the records from index from on,
// for at most a minute.
func (a *agentProc) waitRecords(t *testing.T, what string, from int, cond func([]record) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		a.mu.Lock()
		done := cond(a.recs[from:])
		a.mu.Unlock()
		if done {
			return
		}
		select {
		case <-a.done:
			t.Fatalf("%s: the agent ended: %s", what, a.errs.String())
		default:
		}
		if time.Now().After(deadline) {
			a.mu.Lock()
			defer a.mu.Unlock()
			t.Fatalf("%s: not within a minute; last records %+v\nagent stderr:\n%s", what, a.recs[max(0, len(a.recs)-10):], a.errs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the agent (stdin closed) and returns every record.
func (a *agentProc) stop(t *testing.T) []record {
	t.Helper()
	a.stdin.Close()
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop within 30 s of its stdin closing")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.recs) == 0 || a.recs[len(a.recs)-1].Kind != "end" {
		t.Fatalf("the agent did not end cleanly: stderr:\n%s", a.errs.String())
	}
	return a.recs
}

// writesIn lists the entries under ou=writes of the slapd at addr in ns.
func writesIn(t *testing.T, ns *testbed.Netns, addr string) []string {
	return entriesIn(t, ns, addr, "ou=writes,"+testbed.Suffix)
}

// entriesIn lists the DNs of the entries right under base on the slapd at
// addr in ns, bound as its root.
func entriesIn(t *testing.T, ns *testbed.Netns, addr, base string) []string {
	t.Helper()
	dns, err := tryEntriesIn(ns, addr, base)
	if err != nil {
		t.Fatal(err)
	}
	return dns
}

// tryEntriesIn is entriesIn's search, its error returned (base may not
// exist yet on a replica).
func tryEntriesIn(ns *testbed.Netns, addr, base string) ([]string, error) {
	res, err := rootSearch(ns, addr, ldap.NewSearchRequest(base, ldap.ScopeSingleLevel, ldap.NeverDerefAliases,
		0, 30, false, "(objectClass=*)", []string{"1.1"}, nil))
	if err != nil {
		return nil, err
	}
	var dns []string
	for _, e := range res.Entries {
		dns = append(dns, e.DN)
	}
	slices.Sort(dns)
	return dns, nil
}

// counterIn reads counterDN's count in the directory at addr, as root.
func counterIn(ns *testbed.Netns, addr string) (int, error) {
	res, err := rootSearch(ns, addr, ldap.NewSearchRequest(counterDN, ldap.ScopeBaseObject, ldap.NeverDerefAliases,
		0, 30, false, "(objectClass=*)", []string{"mailPreferenceOption"}, nil))
	if err != nil {
		return 0, err
	}
	if len(res.Entries) != 1 {
		return 0, fmt.Errorf("%s: %d entries for %s", addr, len(res.Entries), counterDN)
	}
	return strconv.Atoi(res.Entries[0].GetAttributeValue("mailPreferenceOption"))
}

// rootSearch runs req as root on the directory at addr, inside ns.
func rootSearch(ns *testbed.Netns, addr string, req *ldap.SearchRequest) (*ldap.SearchResult, error) {
	c, err := ns.Dial("", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	l := ldap.NewConn(c, false)
	l.Start()
	defer l.Close()
	if err := l.Bind(testbed.RootDN, testbed.RootPW); err != nil {
		return nil, fmt.Errorf("bind %s: %w", addr, err)
	}
	res, err := l.Search(req)
	if err != nil {
		return nil, fmt.Errorf("search %s: %w", addr, err)
	}
	return res, nil
}

// waitIn waits until addr accepts inside ns, for at most 15 s.
func waitIn(t *testing.T, ns *testbed.Netns, addr string, p *testbed.Proc) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := ns.Dial("", addr, time.Second); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not accept within 15 s:\n%s", addr, p.Output())
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// lastTarget is the directory (index into the slapds) of the agent's
// latest operation in the core's log.
func lastTarget(t *testing.T, log string) int {
	t.Helper()
	target := ""
	for _, l := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "ldap op" && m["user"] == testbed.User("alice") {
			target, _ = m["target"].(string)
		}
	}
	n, err := strconv.Atoi(strings.TrimPrefix(target, "L"))
	if err != nil || n < 1 || n > 3 {
		t.Fatalf("no directory in use in the core's log (last target %q)", target)
	}
	return n - 1
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func hostPart(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}
