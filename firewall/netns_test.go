package firewall

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

const (
	port = 8636
	// allowed is how long an allowed connection may take; dropped is how
	// long a connection whose SYN is dropped is given before it counts as
	// dropped (no retransmission happens within it).
	allowed = 3 * time.Second
	dropped = 400 * time.Millisecond
)

// family picks one family's addresses in a DockerHost.
type family struct {
	name string
	addr func(*testbed.DockerHost) testbed.HostAddrs
}

var families = []family{
	{"IPv4", func(d *testbed.DockerHost) testbed.HostAddrs { return d.V4 }},
	{"IPv6", func(d *testbed.DockerHost) testbed.HostAddrs { return d.V6 }},
}

func dockerHost(t *testing.T) *testbed.DockerHost {
	testbed.NeedRoot(t)
	testbed.Need(t, "ip", "iptables", "ip6tables")
	return testbed.NewDockerHost(t, port)
}

// netns needs root and the iptables tools and makes a network namespace
// for the test (name makes it easier to find).
func netns(t *testing.T, name string) *testbed.Netns {
	t.Helper()
	testbed.NeedRoot(t)
	testbed.Need(t, "ip", "iptables", "ip6tables")
	return testbed.NewNetns(t, name)
}

// netnsWithEth0 is netns with an interface eth0 (a veth whose peer stays
// in the namespace) for the rules to pin.
func netnsWithEth0(t *testing.T, name string) *testbed.Netns {
	t.Helper()
	ns := netns(t, name)
	ns.Run("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer")
	return ns
}

// edge1Config lets edge-1 (198.51.100.10, 2001:db8:e::10) in on eth0 to
// the origin port.
func edge1Config() Config {
	c := DefaultConfig()
	c.Ports = []int{port}
	c.Interface = "eth0"
	c.Edges = []Edge{{Name: "edge-1", IPv4: "198.51.100.10", IPv6: "2001:db8:e::10"}}
	return c
}

// edge1Input lets edge-1 (198.51.100.10) in to port, in the INPUT chain.
func edge1Input(port int) Config {
	c := DefaultConfig()
	c.Chain = Input
	c.Ports = []int{port}
	c.Edges = []Edge{{Name: "edge-1", IPv4: "198.51.100.10"}}
	return c
}

func hostConfig(d *testbed.DockerHost, withEdge2 bool) Config {
	c := DefaultConfig()
	c.Ports = []int{port}
	c.Interface = d.ExtIf
	c.Edges = []Edge{{Name: "edge-1", IPv4: d.V4.Edge.String(), IPv6: d.V6.Edge.String()}}
	if withEdge2 {
		c.Edges = append(c.Edges, Edge{Name: "edge-2", IPv4: d.V4.Edge2.String(), IPv6: d.V6.Edge2.String()})
	}
	return c
}

// in runs fn with a Firewall opened inside ns.
func in(t *testing.T, ns *testbed.Netns, fn func(fw *Firewall) error) {
	t.Helper()
	err := ns.Do(func() error {
		fw, err := Open("auto", DockerUser)
		if err != nil {
			return err
		}
		return fn(fw)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// watchIn runs fw.Watch with c and every inside ns until the returned
// stop is called, which wants the watch to have ended without an error.
func watchIn(t *testing.T, ns *testbed.Netns, c Config, every time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ns.Do(func() error {
			fw, err := Open("auto", DockerUser)
			if err != nil {
				return err
			}
			return fw.Watch(ctx, Static(c), every, nil)
		})
	}()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// waitForJumps waits (10 s at the most, a hang guard) until DOCKER-USER in
// ns starts with the jump to our chain in both families; failing says
// what it did not see.
func waitForJumps(t *testing.T, ns *testbed.Netns, failing string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out4 := ns.Run("iptables", "-S", "DOCKER-USER", "1")
		out6 := ns.Run("ip6tables", "-S", "DOCKER-USER", "1")
		if strings.Contains(out4, "-j EDGEFLEET-") && strings.Contains(out6, "-j EDGEFLEET-") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s:\n%s%s", failing, out4, out6)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func apply(t *testing.T, ns *testbed.Netns, c Config) *Plan {
	t.Helper()
	var p *Plan
	in(t, ns, func(fw *Firewall) error {
		var err error
		if p, err = fw.Plan(c); err != nil {
			return err
		}
		return fw.Apply(p)
	})
	return p
}

// inbound connects from ns (source address src) to the published port.
func inbound(d *testbed.DockerHost, ns *testbed.Netns, src string, a testbed.HostAddrs, timeout time.Duration) error {
	return ns.Echo(src, a.Published(d.Port), timeout)
}

// strangerElsewhere connects from the stranger behind the host's second
// interface (not the pinned one) to the port published there: it spoofs
// nothing, it only comes in another way.
func strangerElsewhere(d *testbed.DockerHost, a testbed.HostAddrs, timeout time.Duration) error {
	return d.Stranger2.Echo(a.Stranger2.String(), net.JoinHostPort(a.Host2.String(), strconv.Itoa(d.Port)), timeout)
}

// outbound is the seed's bug: a process in the container connects to the
// edge on the published port's number.
func outbound(d *testbed.DockerHost, a testbed.HostAddrs, timeout time.Duration) error {
	return d.Container.Echo("", net.JoinHostPort(a.Edge.String(), strconv.Itoa(d.Port)), timeout)
}

// assertEdgeOnly checks, in both families, that the edge reaches the
// published port, a stranger is dropped and the container still reaches
// the edge.
func assertEdgeOnly(t *testing.T, d *testbed.DockerHost) {
	t.Helper()
	for _, f := range families {
		a := f.addr(d)
		if err := inbound(d, d.Edge, a.Edge.String(), a, allowed); err != nil {
			t.Errorf("%s: edge: %v", f.name, err)
		}
		if err := inbound(d, d.Stranger, a.Stranger.String(), a, dropped); !isTimeout(err) {
			t.Errorf("%s: stranger: err = %v, want dropped", f.name, err)
		}
		if err := outbound(d, a, allowed); err != nil {
			t.Errorf("%s: container outbound: %v", f.name, err)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestDockerUser is the whole story on a Docker-like host built from
// namespaces: the bypass, the rules, the seed's bug, check, watch, remove.
func TestDockerUser(t *testing.T) {
	t.Parallel()
	d := dockerHost(t)
	for _, f := range families {
		a := f.addr(d)
		if err := inbound(d, d.Stranger, a.Stranger.String(), a, allowed); err != nil {
			t.Fatalf("%s before apply: the stranger should reach the published port (Docker's bypass): %v", f.name, err)
		}
		if err := strangerElsewhere(d, a, allowed); err != nil {
			t.Fatalf("%s before apply: the stranger on the other interface should reach the published port: %v", f.name, err)
		}
	}
	c := hostConfig(d, false)
	p := apply(t, d.Host, c)
	if p.Generation != 1 {
		t.Errorf("first generation = %d", p.Generation)
	}
	assertEnforced := func(t *testing.T) {
		t.Helper()
		for _, f := range families {
			a := f.addr(d)
			if err := inbound(d, d.Edge, a.Edge.String(), a, allowed); err != nil {
				t.Errorf("%s: edge → published port: %v", f.name, err)
			}
			if err := inbound(d, d.Stranger, a.Stranger.String(), a, dropped); !isTimeout(err) {
				t.Errorf("%s: stranger → published port: err = %v, want dropped (timeout)", f.name, err)
			}
			if err := inbound(d, d.Edge, a.Edge2.String(), a, dropped); !isTimeout(err) {
				t.Errorf("%s: unlisted edge address → published port: err = %v, want dropped", f.name, err)
			}
			if err := strangerElsewhere(d, a, dropped); !isTimeout(err) {
				t.Errorf("%s: stranger on the host's other interface → published port: err = %v, want dropped", f.name, err)
			}
			if err := outbound(d, a, allowed); err != nil {
				t.Errorf("%s: container → edge on port %d (the seed's bug): %v", f.name, d.Port, err)
			}
		}
	}
	t.Run("enforced", assertEnforced)

	t.Run("check", func(t *testing.T) {
		in(t, d.Host, func(fw *Firewall) error {
			rep, err := fw.Check(c)
			if err != nil {
				return err
			}
			if !rep.InSync() {
				t.Errorf("check right after apply:\n%s", strings.Join(rep.Diff, "\n"))
			}
			// Sources reads the allowed edge back, both families.
			src, err := fw.Sources(DockerUser)
			if err != nil {
				return err
			}
			if len(src) != 2 || src[0] != d.V4.Edge || src[1] != d.V6.Edge {
				t.Errorf("Sources = %v, want %v and %v", src, d.V4.Edge, d.V6.Edge)
			}
			other := hostConfig(d, true)
			if rep, err = fw.Check(other); err != nil {
				return err
			}
			if rep.InSync() || !strings.Contains(strings.Join(rep.Diff, "\n"), `+ -A EDGEFLEET -s 198.51.100.11/32`) {
				t.Errorf("check against a changed edge list: want a diff adding edge-2, got\n%s", strings.Join(rep.Diff, "\n"))
			}
			return nil
		})
	})

	t.Run("stale jump and chain", func(t *testing.T) {
		// A second jump to the live chain further down, and an orphan chain
		// of an older generation: check reports both, apply clears them.
		d.Host.Run("iptables", "-A", "DOCKER-USER", "-j", p.Chain())
		d.Host.Run("iptables", "-N", "EDGEFLEET-0007")
		d.Host.Run("ip6tables", "-N", "EDGEFLEET-1000")
		in(t, d.Host, func(fw *Firewall) error {
			rep, err := fw.Check(c)
			if err != nil {
				return err
			}
			diff := strings.Join(rep.Diff, "\n")
			if !strings.Contains(diff, "- # stale jump: -A DOCKER-USER -j EDGEFLEET-1") || !strings.Contains(diff, "- # stale chain: EDGEFLEET-1000") {
				t.Errorf("check: want the stale jump and chain reported, got\n%s", diff)
			}
			q, err := fw.Plan(c)
			if err != nil {
				return err
			}
			if q.Generation != 1001 {
				t.Errorf("next generation = %d, want 1001 (after the newest chain of either family)", q.Generation)
			}
			if err := fw.Apply(q); err != nil {
				return err
			}
			if rep, err = fw.Check(c); err == nil && !rep.InSync() {
				t.Errorf("check after apply:\n%s", strings.Join(rep.Diff, "\n"))
			}
			return err
		})
		if out := d.Host.Run("iptables", "-S"); strings.Count(out, "-j EDGEFLEET-") != 1 || strings.Count(out, "-N EDGEFLEET-") != 2 {
			// EDGEFLEET-0007 is not a generation name (leading zero): left alone.
			t.Errorf("after apply:\n%s", out)
		}
		d.Host.Run("iptables", "-X", "EDGEFLEET-0007")
		assertEnforced(t)
	})

	t.Run("watch restores a flushed DOCKER-USER", func(t *testing.T) {
		defer watchIn(t, d.Host, c, 50*time.Millisecond)()
		for _, cmd := range []string{"iptables", "ip6tables"} {
			// What a dockerd restart does: DOCKER-USER flushed, its RETURN
			// put back, our chain left unreferenced.
			d.Host.Run(cmd, "-F", "DOCKER-USER")
			d.Host.Run(cmd, "-A", "DOCKER-USER", "-j", "RETURN")
		}
		waitForJumps(t, d.Host, "watch did not restore the jump")
		assertEnforced(t)
		if out := d.Host.Run("iptables", "-S"); strings.Count(out, "-N EDGEFLEET-") != 1 {
			t.Errorf("want exactly one generation chain after the watch re-applied:\n%s", out)
		}
	})

	t.Run("watch restores the previous rules when a re-apply breaks a working edge", func(t *testing.T) {
		for _, cmd := range []string{"iptables", "ip6tables"} {
			d.Host.Run(cmd, "-F", "DOCKER-USER")
			d.Host.Run(cmd, "-A", "DOCKER-USER", "-j", "RETURN")
		}
		before := d.Host.Run("iptables", "-S", "DOCKER-USER")
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var logged bytes.Buffer
		log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
		checked := make(chan string, 1)
		guard := func(c Config) func() error {
			return func() error {
				// What the probe after the re-apply sees: an edge that got
				// through before no longer does.
				checked <- d.Host.Run("iptables", "-S", "DOCKER-USER")
				return errors.New("e1 10.0.0.1:636 no longer gets through")
			}
		}
		done := make(chan error, 1)
		go func() {
			done <- d.Host.Do(func() error {
				fw, err := Open("auto", DockerUser)
				if err != nil {
					return err
				}
				return fw.WatchGuarded(ctx, Static(c), time.Hour, log, guard) // one round
			})
		}()
		applied := <-checked
		if !strings.Contains(applied, "-j EDGEFLEET-") {
			t.Errorf("the guard ran before the re-apply:\n%s", applied)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			out := logged.String()
			mu.Unlock()
			if strings.Contains(out, "firewall re-apply broke a working edge: the previous rules are restored") && strings.Contains(out, "e1 10.0.0.1:636 no longer gets through") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no log line of the restore:\n%s", out)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if after := d.Host.Run("iptables", "-S", "DOCKER-USER"); after != before {
			t.Errorf("rules after the regression:\n%swant those before the re-apply:\n%s", after, before)
		}
		// Put the rules back for the subtests after.
		in(t, d.Host, func(fw *Firewall) error {
			p, err := fw.Plan(c)
			if err != nil {
				return err
			}
			return fw.Apply(p)
		})
		assertEnforced(t)
	})

	t.Run("remove", func(t *testing.T) {
		in(t, d.Host, func(fw *Firewall) error { return fw.Remove() })
		for _, cmd := range []string{"iptables", "ip6tables"} {
			if out := d.Host.Run(cmd, "-S"); strings.Contains(out, "EDGEFLEET") {
				t.Errorf("%s after remove:\n%s", cmd, out)
			}
		}
		for _, f := range families {
			a := f.addr(d)
			if err := inbound(d, d.Stranger, a.Stranger.String(), a, allowed); err != nil {
				t.Errorf("%s after remove: stranger: %v", f.name, err)
			}
		}
	})
}

// TestPinIsNeeded applies the weaker rule set, without the interface pin,
// and shows it breaks the container's outbound connections: the proof that
// TestDockerUser's outbound assertion tests the pin.
func TestPinIsNeeded(t *testing.T) {
	t.Parallel()
	d := dockerHost(t)
	weak := hostConfig(d, false)
	weak.Interface = ""
	if _, err := NewPlan(weak, 1); err == nil {
		t.Fatal("an unpinned DOCKER-USER rule set was accepted without --force")
	}
	weak.Force = true
	p := apply(t, d.Host, weak)
	if len(p.Warnings) == 0 {
		t.Error("forced unpinned plan carries no warning")
	}
	for _, f := range families {
		a := f.addr(d)
		if err := inbound(d, d.Edge, a.Edge.String(), a, allowed); err != nil {
			t.Errorf("%s: edge: %v", f.name, err)
		}
		if err := outbound(d, a, dropped); !isTimeout(err) {
			t.Errorf("%s: without the pin the container's outbound connection to the edge's port %d should be dropped (conntrack direction alone does not tell it apart), got err = %v", f.name, d.Port, err)
		}
	}
	// Pinned by the published address instead of the interface: fixed.
	pinned := hostConfig(d, false)
	pinned.Interface = ""
	pinned.Address = d.V4.Host.String()
	apply(t, d.Host, pinned)
	if err := outbound(d, d.V4, allowed); err != nil {
		t.Errorf("IPv4 pinned by --ctorigdst: outbound: %v", err)
	}
	if err := inbound(d, d.Stranger, d.V4.Stranger.String(), d.V4, dropped); !isTimeout(err) {
		t.Errorf("IPv4 pinned by --ctorigdst: stranger: err = %v, want dropped", err)
	}
	if err := strangerElsewhere(d, d.V4, dropped); !isTimeout(err) {
		t.Errorf("IPv4 pinned by --ctorigdst: stranger on the other interface, to the address published there: err = %v, want dropped", err)
	}
	if err := inbound(d, d.Edge, d.V4.Edge.String(), d.V4, allowed); err != nil {
		t.Errorf("IPv4 pinned by --ctorigdst: edge: %v", err)
	}
}

// swapCounts is what the swap loop saw.
type swapCounts struct {
	applies                       int
	edgeTried, edgeFailed         atomic.Int64
	outTried, outFailed           atomic.Int64
	strangerTried, strangerLeaked atomic.Int64
	firstEdgeErr, firstOutErr     atomic.Value
}

// TestSwapIsAtomic re-applies a changing edge list while edges, the
// container and a stranger keep connecting: no allowed connection may
// fail, no stranger may get through.
func TestSwapIsAtomic(t *testing.T) {
	t.Parallel()
	d := dockerHost(t)
	apply(t, d.Host, hostConfig(d, false))
	const applies = 30
	var n swapCounts
	stop := make(chan struct{})
	var wg sync.WaitGroup
	loop := func(fn func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				fn(i)
			}
		}()
	}
	loop(func(i int) {
		a := families[i%2].addr(d)
		n.edgeTried.Add(1)
		if err := inbound(d, d.Edge, a.Edge.String(), a, allowed); err != nil {
			n.edgeFailed.Add(1)
			n.firstEdgeErr.CompareAndSwap(nil, err.Error())
		}
	})
	loop(func(i int) {
		a := families[i%2].addr(d)
		n.outTried.Add(1)
		if err := outbound(d, a, allowed); err != nil {
			n.outFailed.Add(1)
			n.firstOutErr.CompareAndSwap(nil, err.Error())
		}
	})
	for w := 0; w < 4; w++ {
		loop(func(i int) {
			a := families[(i+w)%2].addr(d)
			n.strangerTried.Add(1)
			try := func() error { return inbound(d, d.Stranger, a.Stranger.String(), a, dropped) }
			if w >= 2 { // half the loops come through the host's other interface
				try = func() error { return strangerElsewhere(d, a, dropped) }
			}
			if try() == nil {
				n.strangerLeaked.Add(1)
			}
		})
	}
	start := time.Now()
	for i := 0; i < applies; i++ {
		apply(t, d.Host, hostConfig(d, i%2 == 0))
		n.applies++
	}
	took := time.Since(start)
	close(stop)
	wg.Wait()
	summary := "swap loop: " + strconv.Itoa(n.applies) + " applies in " + took.Round(time.Millisecond).String() +
		"; edge connections tried " + strconv.FormatInt(n.edgeTried.Load(), 10) + ", failed " + strconv.FormatInt(n.edgeFailed.Load(), 10) +
		"; container outbound tried " + strconv.FormatInt(n.outTried.Load(), 10) + ", failed " + strconv.FormatInt(n.outFailed.Load(), 10) +
		"; stranger tried " + strconv.FormatInt(n.strangerTried.Load(), 10) + ", leaked " + strconv.FormatInt(n.strangerLeaked.Load(), 10)
	t.Log(summary)
	if n.edgeFailed.Load() != 0 || n.outFailed.Load() != 0 || n.strangerLeaked.Load() != 0 {
		t.Errorf("not atomic: %s (first edge error %v, first outbound error %v)", summary, n.firstEdgeErr.Load(), n.firstOutErr.Load())
	}
	if n.edgeTried.Load() < applies || n.strangerTried.Load() < 4 {
		t.Errorf("the loops barely ran: %s", summary)
	}
	if out := d.Host.Run("iptables", "-S"); strings.Count(out, "-N EDGEFLEET-") != 1 {
		t.Errorf("old generation chains left behind:\n%s", out)
	}
}

// TestWatchWaitsForDockerUser starts the watch before "dockerd" has made
// its chain: it must neither create DOCKER-USER nor give up, and apply as
// soon as the chain appears.
func TestWatchWaitsForDockerUser(t *testing.T) {
	t.Parallel()
	ns := netnsWithEth0(t, "late")
	c := edge1Config()
	offline, err := NewPlan(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	in(t, ns, func(fw *Firewall) error {
		if err := fw.Apply(offline); err == nil || !strings.Contains(err.Error(), "has no DOCKER-USER chain: refusing to create it") {
			t.Errorf("Apply of a plan without CreateChain on a host without DOCKER-USER: err = %v", err)
		}
		return nil
	})
	defer watchIn(t, ns, c, 20*time.Millisecond)()
	time.Sleep(200 * time.Millisecond) // several watch rounds with no chain
	for _, cmd := range []string{"iptables", "ip6tables"} {
		if out, err := ns.Try(cmd, "-S", "DOCKER-USER"); err == nil {
			t.Fatalf("watch created DOCKER-USER in %s:\n%s", cmd, out)
		}
		ns.Run(cmd, "-N", "DOCKER-USER")
		ns.Run(cmd, "-A", "DOCKER-USER", "-j", "RETURN")
	}
	waitForJumps(t, ns, "watch did not apply once DOCKER-USER appeared")
}

// TestLegacyBackend: on a host whose dockerd uses iptables-legacy, "auto"
// must find DOCKER-USER there; rules in nft would never be consulted.
func TestLegacyBackend(t *testing.T) {
	t.Parallel()
	testbed.NeedRoot(t)
	d := testbed.NewDockerHostBackend(t, port, BackendLegacy)
	var backend string
	in(t, d.Host, func(fw *Firewall) error {
		backend = fw.Backend()
		p, err := fw.Plan(hostConfig(d, false))
		if err != nil {
			return err
		}
		if err := fw.Apply(p); err != nil {
			return err
		}
		rep, err := fw.Check(hostConfig(d, false))
		if err == nil && !rep.InSync() {
			t.Errorf("check after apply:\n%s", strings.Join(rep.Diff, "\n"))
		}
		return err
	})
	if backend != BackendLegacy {
		t.Fatalf("detected backend %q, want legacy", backend)
	}
	assertEdgeOnly(t, d)
	if out := d.Host.Run("iptables-nft", "-S"); strings.Contains(out, "EDGEFLEET") {
		t.Errorf("rules went into nft too:\n%s", out)
	}
}

// TestTestChainsLeaveDeploymentAlone: the firewall the real-Docker test
// uses on the machine's own tables (hostTestFirewall) must leave a real
// deployment's EDGEFLEET chain and jump as they were, through apply,
// check and remove.
func TestTestChainsLeaveDeploymentAlone(t *testing.T) {
	t.Parallel()
	ns := netnsWithEth0(t, "prefix")
	c := edge1Config()
	c.CreateChain = true
	apply(t, ns, c) // the deployment: EDGEFLEET-1
	deployment := map[string]string{}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		deployment[cmd] = ns.Run(cmd, "-S", "EDGEFLEET-1")
	}
	ns.Do(func() error {
		fw := hostTestFirewall(t, "abc123")
		test := c
		test.Ports = []int{port + 1}
		p, err := fw.Plan(test)
		if err != nil {
			t.Fatal(err)
		}
		if p.Chain() != "EFTabc123-1" {
			t.Errorf("test chain %s, want EFTabc123-1 (its own generations)", p.Chain())
		}
		if err := fw.Apply(p); err != nil {
			t.Fatal(err)
		}
		if rep, err := fw.Check(test); err != nil || !rep.InSync() {
			t.Errorf("test firewall's check: %v\n%s", err, strings.Join(rep.Diff, "\n"))
		}
		return fw.Remove()
	})
	for _, cmd := range []string{"iptables", "ip6tables"} {
		if out, err := ns.Try(cmd, "-S", "EDGEFLEET-1"); err != nil || out != deployment[cmd] {
			t.Errorf("%s: the deployment's chain changed: %v\n%s", cmd, err, out)
		}
		if out := ns.Run(cmd, "-S", "DOCKER-USER"); strings.Contains(out, "EFT") || !strings.Contains(out, "-A DOCKER-USER -m comment --comment \"edgefleet: jump\" -j EDGEFLEET-1") {
			t.Errorf("%s DOCKER-USER after the test firewall's remove:\n%s", cmd, out)
		}
	}
	in(t, ns, func(fw *Firewall) error {
		rep, err := fw.Check(c)
		if err == nil && !rep.InSync() {
			t.Errorf("the deployment is no longer in sync:\n%s", strings.Join(rep.Diff, "\n"))
		}
		return err
	})
}

// TestInterfaceMustExist: an origin.interface the host does not have (a
// typo) is refused before anything changes — its rules would let no edge
// in; --force applies it with a warning.
func TestInterfaceMustExist(t *testing.T) {
	t.Parallel()
	ns := netns(t, "typo")
	c := edge1Input(port)
	c.Interface = "eth9"
	in(t, ns, func(fw *Firewall) error {
		if _, err := fw.Plan(c); err == nil || !strings.Contains(err.Error(), `origin.interface: no interface "eth9" on this host`) {
			t.Errorf("plan with a missing interface: err = %v", err)
		}
		c.Force = true
		p, err := fw.Plan(c)
		if err != nil || len(p.Warnings) == 0 || !strings.Contains(p.Warnings[0], "eth9") {
			t.Errorf("forced: %v %q", err, p.Warnings)
		}
		return nil
	})
	if out := ns.Run("iptables", "-S"); strings.Contains(out, "EDGEFLEET") {
		t.Errorf("a refused plan changed the rules:\n%s", out)
	}
}

// TestOwner: the rules name their inventory; another inventory's plan on
// the same host is refused (its rules would replace the first's), unless
// forced; rules of no owner are adopted; Save and Restore put back the
// rules as they were, owner included.
func TestOwner(t *testing.T) {
	t.Parallel()
	ns := netns(t, "owner")
	a := edge1Input(8636)
	a.Owner = "ldap.a.test"
	b := a
	b.Ports = []int{9636}
	b.Owner = "ldap.b.test"
	apply(t, ns, a)
	first := ns.Run("iptables", "-S")
	if !strings.Contains(first, `--comment "edgefleet: jump ldap.a.test"`) {
		t.Fatalf("the jump does not name its inventory:\n%s", first)
	}
	in(t, ns, func(fw *Firewall) error {
		_, err := fw.Plan(b)
		if err == nil || !strings.Contains(err.Error(), `the firewall holds the rules of inventory "ldap.a.test": refusing to replace them with those of "ldap.b.test"`) {
			t.Errorf("another inventory's plan: err = %v", err)
		}
		if o, err := fw.Foreign("ldap.b.test"); err != nil || o != "ldap.a.test" {
			t.Errorf("Foreign = %q, %v", o, err)
		}
		saved, err := fw.Save()
		if err != nil {
			return err
		}
		c := a
		c.Edges = append(c.Edges, Edge{Name: "edge-2", IPv4: "198.51.100.11"})
		p, err := fw.Plan(c)
		if err != nil {
			return err
		}
		if err := fw.Apply(p); err != nil {
			return err
		}
		return fw.Restore(saved)
	})
	restored := ns.Run("iptables", "-S")
	if strings.ReplaceAll(restored, "EDGEFLEET-3", "EDGEFLEET-1") != first {
		t.Errorf("restored:\n%s\nwant (as generation 3):\n%s", restored, first)
	}
	// Rules without an owner (written before rules named theirs) are
	// replaced.
	in(t, ns, func(fw *Firewall) error { return fw.Remove() })
	legacy := a
	legacy.Owner = ""
	apply(t, ns, legacy)
	apply(t, ns, b)
	if out := ns.Run("iptables", "-S"); !strings.Contains(out, "jump ldap.b.test") || strings.Contains(out, "8636") {
		t.Errorf("after adopting unnamed rules:\n%s", out)
	}
}

// lockedWriter is a writer shared by a logger and a test.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
