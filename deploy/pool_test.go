package deploy

import (
	"context"
	"maps"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgefleet/edgefleet/firewall"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// poolConfig is deployConfig with two origin hosts, the first with two
// ports, and round robin on the edges.
func poolConfig() Config {
	c := deployConfig()
	c.Origin = DefaultConfig().Origin
	c.Origins = []Origin{
		{Name: "par-a", Address: "192.0.2.2", Ports: []int{8636, 8637}, Interface: "eth0"},
		{Name: "par-b", Address: "192.0.2.3", Interface: "eth0", SSH: "root@192.0.2.3",
			HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJzaL4nfthNmBsJ4jMRTX6V25xL0NYFc5pcB3WZgOtWX"},
	}
	c.Deploy.Balance = "round-robin"
	return c
}

// TestRenderPool: every origin host's address and port goes into the
// edge's origins under the host's name, with deploy.balance; the edge
// binary itself accepts the file and names the origins as fleet does.
func TestRenderPool(t *testing.T) {
	c := poolConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := Render(c, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "edge-1-pool.edge.yaml", string(r.EdgeConfig))
	path := testbed.WriteFile(t, t.TempDir(), "edge.yaml", string(r.EdgeConfig))
	out, err := exec.Command(edgeBinary(t), "--config", path, "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("edge --check: %v\n%s", err, out)
	}
	if want := "edge: configuration ok (name edge-1, origins par-a-8636 par-a-8637 par-b)"; strings.TrimSpace(string(out)) != want {
		t.Fatalf("edge --check said %q, want %q", out, want)
	}
}

// TestPoolOfOne: the single origin form is a pool of one host called
// origin, and its rendering is unchanged (no names: o1, o2 … by position).
func TestPoolOfOne(t *testing.T) {
	c := deployConfig()
	hosts := c.Hosts()
	if len(hosts) != 1 || hosts[0].Name != "origin" || hosts[0].Address != "192.0.2.2" || !hosts[0].Local() {
		t.Fatalf("hosts of the single form: %+v", hosts)
	}
	origins := c.Deploy.origins(c)
	if len(origins) != 1 || origins[0].Name != "" || origins[0].Address != "192.0.2.2:8636" {
		t.Fatalf("origins of the single form: %+v", origins)
	}
	if got := poolConfig().Ports(); len(got) != 2 || got[0] != 8636 || got[1] != 8637 {
		t.Fatalf("pool ports %v, want [8636 8637]", got)
	}
}

// nsFirewall is an origin host's real iptables inside a network namespace
// of the test: every call runs on a thread in the namespace (the
// iptables processes inherit it). A namespace that is gone is a host that
// cannot be reached.
type nsFirewall struct {
	ns   *testbed.Netns
	base firewall.Config
	w    *fakeWorld // where changes are logged (may be nil)
	name string
}

func (f nsFirewall) do(fn func(t IPTables) error) error {
	return f.ns.Do(func() error {
		fw, err := firewall.Open("auto", f.base.Chain)
		if err != nil {
			return err
		}
		return fn(IPTables{FW: fw, Base: f.base})
	})
}

func (f nsFirewall) Diff(edges []Edge) (d []string, err error) {
	err = f.do(func(t IPTables) error { d, err = t.Diff(edges); return err })
	return d, err
}

func (f nsFirewall) Allow(edges []Edge) (undo func() error, err error) {
	err = f.do(func(t IPTables) error {
		u, err := t.Allow(edges)
		if u != nil {
			undo = func() error { return f.ns.Do(u) }
		}
		return err
	})
	if err == nil && undo != nil && f.w != nil {
		f.w.log("firewall %s allows %s", f.name, strings.Join(names(edges), " "))
	}
	return undo, err
}

func (f nsFirewall) Allowed() (m map[netip.Addr]bool, err error) {
	err = f.do(func(t IPTables) error { m, err = t.Allowed(); return err })
	return m, err
}

func (f nsFirewall) Sources() (m map[netip.Addr]string, err error) {
	err = f.do(func(t IPTables) error { m, err = t.Sources(); return err })
	return m, err
}

func (f nsFirewall) Report(edges []Edge) (r firewall.Report, err error) {
	err = f.do(func(t IPTables) error { r, err = t.Report(edges); return err })
	return r, err
}

// originHosts are two origin hosts, a and b, each a namespace with its own
// iptables (INPUT chain mode, port 8636), as the pool fleet converges.
func originHosts(t *testing.T, w *fakeWorld) (Pool, [2]*testbed.Netns) {
	t.Helper()
	testbed.NeedRoot(t)
	testbed.Need(t, "ip", "iptables", "ip6tables")
	var ns [2]*testbed.Netns
	var pool Pool
	for i, name := range []string{"a", "b"} {
		ns[i] = testbed.NewNetns(t, "orig"+name)
		base := firewall.Config{Chain: firewall.Input, Ports: []int{8636}, Owner: "ldap.example.net"}
		pool = append(pool, HostFirewall{Name: name, Firewall: nsFirewall{ns: ns[i], base: base, w: w, name: name}})
	}
	return pool, ns
}

// dnsWatch is the fake DNS that, before each change, writes into the
// event log which edges each origin host's real rules let in: the proof of
// the order.
type dnsWatch struct {
	fakeDNS
	pool Pool
}

func (d dnsWatch) Apply(ctx context.Context, c Change) error {
	for _, h := range d.pool {
		src, err := h.Sources()
		if err != nil {
			return err
		}
		d.w.log("  %s lets in %s", h.Name, strings.Join(slices.Sorted(maps.Values(dedup(src))), " "))
	}
	return d.fakeDNS.Apply(ctx, c)
}

// dedup is the edge names of src, each once.
func dedup(src map[netip.Addr]string) map[string]string {
	m := map[string]string{}
	for _, n := range src {
		m[n] = n
	}
	return m
}

// TestPoolRotation: rotating e1 out and e3 in over two origin hosts with
// real iptables: both hosts let e3 in before DNS adds it, both still let
// e1 in when DNS removes it, and both drop it only after its wait (TTL +
// slack, then its drain), both in one step.
func TestPoolRotation(t *testing.T) { synctest.Test(t, testPoolRotation) }

func testPoolRotation(t *testing.T) {
	w, conv := world(t)
	pool, ns := originHosts(t, w)
	var out strings.Builder // the step lines of the last run
	run := func(edges ...Edge) *Converger {
		c := conv(edges...)
		out.Reset()
		c.Firewall, c.DNS, c.Out = pool, dnsWatch{fakeDNS{w}, pool}, &out
		if err := c.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		return c
	}
	stepLines := func(want ...string) {
		t.Helper()
		for _, l := range want {
			if !strings.Contains(out.String(), l+"\n") {
				t.Errorf("no line %q in:\n%s", l, out.String())
			}
		}
	}
	run(e1, e2) // both hosts get their first rules
	if want := []string{"firewall a allows e1 e2", "firewall b allows e1 e2"}; !slices.Equal(w.events, want) {
		t.Fatalf("first run:\n%s\nwant:\n%s", strings.Join(w.events, "\n"), strings.Join(want, "\n"))
	}
	w.events = nil
	start := w.clock.Now()
	run(e2, e3)
	if !slices.Equal(w.events, poolRotation) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(w.events, "\n"), strings.Join(poolRotation, "\n"))
	}
	if waited := w.clock.Now().Sub(start); waited < 65*time.Second {
		t.Fatalf("waited %v in all, want at least TTL 60s + slack 5s before the drop", waited)
	}
	stepLines("step 1/6 firewall: applied, allowing e2 e3 e1 (changed on a, b)",
		"step 6/6 firewall: applied, allowing e2 e3 (changed on a, b)")
	for i, n := range ns {
		out := n.Run("iptables", "-S")
		if !strings.Contains(out, "-s 192.0.2.3/32") || strings.Contains(out, "-s 192.0.2.1/32") {
			t.Fatalf("host %d's rules after the rotation:\n%s", i, out)
		}
		if out6 := n.Run("ip6tables", "-S"); !strings.Contains(out6, "-s 2001:db8::3/128") {
			t.Fatalf("host %d's IPv6 rules after the rotation:\n%s", i, out6)
		}
	}
	hosts := pool.Hosts([]Edge{e2, e3})
	for _, h := range hosts {
		if h.Error != "" || len(h.Drift) != 0 || len(h.Chains) != 2 {
			t.Fatalf("status of host %s: %+v", h.Name, h)
		}
	}
	// A rule added by hand on b is b's drift, and only b's.
	ns[1].Run("iptables", "-I", "INPUT", "1", "-s", "198.51.100.9", "-j", "ACCEPT")
	hosts = pool.Hosts([]Edge{e2, e3})
	var b strings.Builder
	if err := PrintHosts(&b, hosts); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[1], "a       IPv4: EDGEFLEET-") || !strings.HasSuffix(lines[1], "in sync") ||
		!strings.Contains(lines[2], "rule lines differ (fleet apply converges it)") || len(HostProblems(hosts)) != 1 {
		t.Fatalf("hosts after a hand-made rule on b:\n%s", b.String())
	}
	// The next run puts b back and says a needed nothing; the one after
	// changes neither.
	run(e2, e3)
	stepLines("step 1/6 firewall: applied, allowing e2 e3 (changed on b; a already did)")
	run(e2, e3)
	stepLines("step 1/6 firewall: in sync, allowing e2 e3 (on every origin host)")
}

// TestPoolUnreachableHost: with origin host b unreachable (its namespace
// gone) a rotation stops before anything changes: no DNS change, host a's
// rules as they were, and the error names b.
func TestPoolUnreachableHost(t *testing.T) { synctest.Test(t, testPoolUnreachableHost) }

func testPoolUnreachableHost(t *testing.T) {
	w, conv := world(t)
	pool, ns := originHosts(t, w)
	c := conv(e1, e2)
	c.Firewall = pool
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := ns[0].Run("iptables-save")
	dnsBefore := w.dns.Addrs()
	exec.Command("ip", "netns", "del", ns[1].Name).Run()
	w.events = nil

	c = conv(e2, e3)
	c.Firewall = pool
	err := c.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "origin b: ") {
		t.Fatalf("run with host b unreachable: %v, want an error naming origin b", err)
	}
	if len(w.events) != 0 {
		t.Fatalf("changes with a host unreachable: %q", w.events)
	}
	if !slices.Equal(w.dns.Addrs(), dnsBefore) {
		t.Fatalf("DNS moved: %v, was %v", w.dns.Addrs(), dnsBefore)
	}
	if after := ns[0].Run("iptables-save"); stripCounters(after) != stripCounters(before) {
		t.Fatalf("host a's rules changed:\n%s\nwere:\n%s", after, before)
	}

	// Allow itself reads every host before it changes one.
	if _, err := pool.Allow([]Edge{e2, e3}); err == nil || !strings.Contains(err.Error(), "no origin host changed") {
		t.Fatalf("Allow with host b unreachable: %v", err)
	}
	if after := ns[0].Run("iptables-save"); stripCounters(after) != stripCounters(before) {
		t.Fatalf("host a's rules changed by Allow:\n%s", after)
	}
}

// stripCounters drops iptables-save's comment lines and packet counters.
func stripCounters(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.Index(l, " ["); strings.HasPrefix(l, ":") && i > 0 {
			l = l[:i]
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// poolRotation is what the rotation of e1 out and e3 in does over the
// pool of hosts a and b, in order: both let e3 in before it is probed and
// added to DNS, both still let e1 in while it leaves DNS and drains, both
// drop it after.
var poolRotation = []string{
	"firewall a allows e1 e2 e3", "firewall b allows e1 e2 e3",
	"probe 192.0.2.3:636", "probe [2001:db8::3]:636",
	"  a lets in e1 e2 e3", "  b lets in e1 e2 e3", "dns add A 192.0.2.3 (e3)",
	"  a lets in e1 e2 e3", "  b lets in e1 e2 e3", "dns add AAAA 2001:db8::3 (e3)",
	"  a lets in e1 e2 e3", "  b lets in e1 e2 e3", "dns remove A 192.0.2.1 (e1)",
	"conns 192.0.2.1:9101 = 1", "conns 192.0.2.1:9101 = 1", "conns 192.0.2.1:9101 = 0",
	"firewall a allows e2 e3", "firewall b allows e2 e3",
}
