package deploy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// fakes record every change in one event log, in order.
type fakeWorld struct {
	events  []string
	dns     RRSet
	allowed []string // edge names the firewall lets in
	probe   map[string]ProbeResult
	conns   []int // successive answers of the metrics endpoint
	clock   interface{ Now() time.Time }
	// checkErr is what the server answers a key check.
	checkErr error
}

func (w *fakeWorld) log(format string, args ...any) {
	w.events = append(w.events, fmt.Sprintf(format, args...))
}

type fakeDNS struct{ w *fakeWorld }

func (d fakeDNS) Read(context.Context) (RRSet, error) {
	s := d.w.dns
	s.A, s.AAAA = slices.Clone(s.A), slices.Clone(s.AAAA)
	return s, nil
}

func (d fakeDNS) Check(context.Context) error { return d.w.checkErr }

func (d fakeDNS) Apply(_ context.Context, c Change) error {
	switch c.Op {
	case OpAdd:
		d.w.dns.add(c.Addr)
		if c.Addr.Is4() {
			d.w.dns.TTLA = c.TTL
		} else {
			d.w.dns.TTLAAAA = c.TTL
		}
	case OpRemove:
		d.w.dns.remove(c.Addr)
		if len(d.w.dns.Addrs()) == 0 {
			return errors.New("the set is empty")
		}
	}
	d.w.log("dns %s", c.Describe())
	return nil
}

type fakeFirewall struct{ w *fakeWorld }

func (f fakeFirewall) Allow(edges []Edge) (bool, error) {
	var names []string
	for _, e := range edges {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	if slices.Equal(names, f.w.allowed) {
		return false, nil
	}
	f.w.allowed = names
	f.w.log("firewall %s", strings.Join(names, " "))
	return true, nil
}

func (f fakeFirewall) Allowed() (map[netip.Addr]bool, error) { return nil, nil }

var (
	e1 = Edge{Name: "e1", IPv4: "192.0.2.1", Metrics: "192.0.2.1:9101"}
	e2 = Edge{Name: "e2", IPv4: "192.0.2.2"}
	e3 = Edge{Name: "e3", IPv4: "192.0.2.3", IPv6: "2001:db8::3"}
)

// since is a clock that reads at when made and then moves with the
// runtime's clock (in a bubble, the fake one).
func since(at time.Time) clockFrom { return clockFrom{at, time.Now()} }

type clockFrom struct{ at, made time.Time }

func (c clockFrom) Now() time.Time { return c.at.Add(time.Since(c.made)) }

// world is a fleet of e1 and e2, published and allowed, e1 with one
// active connection that closes after two looks. It is made in a synctest
// bubble, whose fake clock the converger's waits move.
func world(t *testing.T) (*fakeWorld, func(edges ...Edge) *Converger) {
	w := &fakeWorld{
		dns:     RRSet{A: addrs("192.0.2.1", "192.0.2.2"), TTLA: 60},
		allowed: []string{"e1", "e2"},
		probe:   map[string]ProbeResult{},
		conns:   []int{1, 1, 0},
		clock:   since(time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)),
	}
	statePath := filepath.Join(t.TempDir(), StateFile)
	return w, func(edges ...Edge) *Converger {
		cfg := validConfig()
		cfg.Edges = edges
		cfg.TTL = 60
		return &Converger{
			Config: cfg, StatePath: statePath, DNS: fakeDNS{w}, Firewall: fakeFirewall{w},
			Probe: func(_ context.Context, addr string) ProbeResult {
				w.log("probe %s", addr)
				if r, ok := w.probe[addr]; ok {
					return r
				}
				return ProbeResult{OK: true, HandshakeMS: 2}
			},
			Conns: func(_ context.Context, m string) (int, error) {
				n := w.conns[0]
				if len(w.conns) > 1 {
					w.conns = w.conns[1:]
				}
				w.log("conns %s = %d", m, n)
				return n, nil
			},
			Slack: 5 * time.Second,
			Now:   w.clock.Now,
			Out:   &testbed.Buffer{},
		}
	}
}

// TestConvergeRotate: e1 -> e3 in the safe order: the firewall allows e3,
// e3 is probed on each address, DNS adds e3 then removes e1, e1 waits one
// TTL plus slack and its drain, then the firewall drops it.
func TestConvergeRotate(t *testing.T) { synctest.Test(t, testConvergeRotate) }

func testConvergeRotate(t *testing.T) {
	w, conv := world(t)
	if err := conv(e1, e2).Run(context.Background()); err != nil { // records e1 and e2 as active
		t.Fatal(err)
	}
	if len(w.events) != 0 {
		t.Fatalf("a run with nothing to do changed %q", w.events)
	}
	c := conv(e2, e3)
	start := w.clock.Now()
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"firewall e1 e2 e3",
		"probe 192.0.2.3:636", "probe [2001:db8::3]:636",
		"dns add A 192.0.2.3 (e3)", "dns add AAAA 2001:db8::3 (e3)", "dns remove A 192.0.2.1 (e1)",
		"conns 192.0.2.1:9101 = 1", "conns 192.0.2.1:9101 = 1", "conns 192.0.2.1:9101 = 0",
		"firewall e2 e3",
	}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(w.events, "\n"), strings.Join(want, "\n"))
	}
	// The drain started only once TTL + slack had passed since e1 left DNS.
	if waited := w.clock.Now().Sub(start); waited < 65*time.Second {
		t.Fatalf("waited %v in all, want at least TTL 60s + slack 5s", waited)
	}
	out := c.Out.(*testbed.Buffer).String()
	for _, line := range []string{"resolvers may hold it 1m5s more (TTL 1m0s + slack 5s)", "e1 has 1 active connections; waiting up to 30s more", "e1 has no active connection", "done: ldap.example.net. answers 192.0.2.2 192.0.2.3 2001:db8::3"} {
		if !strings.Contains(out, line) {
			t.Errorf("progress lacks %q:\n%s", line, out)
		}
	}
	st, err := LoadState(c.StatePath)
	if err != nil || len(st.Edges) != 2 || st.Edges["e2"].State != StateActive || st.Edges["e3"].State != StateActive {
		t.Fatalf("state after: %s %v", st.Marshal(), err)
	}
	w.events = nil
	if err := conv(e2, e3).Run(context.Background()); err != nil || len(w.events) != 0 {
		t.Fatalf("rerun: %v, changed %q", err, w.events)
	}
}

// TestConvergeProbeFails: a new edge that fails its probe is allowed by
// the firewall (step 1) and nothing else happens; the run fails.
func TestConvergeProbeFails(t *testing.T) { synctest.Test(t, testConvergeProbeFails) }

func testConvergeProbeFails(t *testing.T) {
	w, conv := world(t)
	conv(e1, e2).Run(context.Background())
	w.probe["192.0.2.3:636"] = ProbeResult{Error: "tls handshake 192.0.2.3:636: no answer within the 2s budget"}
	c := conv(e2, e3)
	err := c.Run(context.Background())
	if !errors.Is(err, ErrProbe) || !strings.Contains(err.Error(), "e3 not published") || !strings.Contains(err.Error(), "no answer within the 2s budget") {
		t.Fatalf("err = %v", err)
	}
	want := []string{"firewall e1 e2 e3", "probe 192.0.2.3:636"}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events %q, want %q", w.events, want)
	}
	st, _ := LoadState(c.StatePath)
	if s := st.Edges["e3"]; s == nil || s.State != StateFailed || s.Error == "" {
		t.Fatalf("state: %s", st.Marshal())
	}
	// Fixed, a rerun goes on from step 2.
	delete(w.probe, "192.0.2.3:636")
	w.events = nil
	if err := conv(e2, e3).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w.events[0] != "probe 192.0.2.3:636" || w.events[len(w.events)-1] != "firewall e2 e3" {
		t.Fatalf("rerun events %q", w.events)
	}
}

// TestConvergeResume: killed in the TTL wait, a rerun neither probes nor
// updates DNS again, waits only what is left of the TTL, and ends in the
// same state as an uninterrupted run.
func TestConvergeResume(t *testing.T) { synctest.Test(t, testConvergeResume) }

func testConvergeResume(t *testing.T) {
	w, conv := world(t)
	conv(e1, e2).Run(context.Background())
	c := conv(e2, e3)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(20 * time.Second) // killed 20 s into the wait
		cancel()
	}()
	if err := c.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	st, _ := LoadState(c.StatePath)
	if s := st.Edges["e1"]; s == nil || s.State != StateDraining || s.LeftDNS.IsZero() || s.TTL != 60 {
		t.Fatalf("state after the interruption: %s", st.Marshal())
	}
	if !slices.Equal(w.allowed, []string{"e1", "e2", "e3"}) {
		t.Fatalf("e1 left the firewall before its wait: %q", w.allowed)
	}
	w.events = nil
	start := w.clock.Now()
	c = conv(e2, e3)
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"conns 192.0.2.1:9101 = 1", "conns 192.0.2.1:9101 = 1", "conns 192.0.2.1:9101 = 0", "firewall e2 e3"}
	if !slices.Equal(w.events, want) {
		t.Fatalf("resumed events %q, want %q", w.events, want)
	}
	if got := c.Out.(*testbed.Buffer).String(); !strings.Contains(got, "resuming: e1 left DNS at 2026-12-01T06:00:00Z") || !strings.Contains(got, "resolvers may hold it 45s more") {
		t.Fatalf("resumed run output:\n%s", got)
	}
	if waited := w.clock.Now().Sub(start); waited >= 65*time.Second {
		t.Fatalf("the resumed run waited %v: the whole TTL again", waited)
	}
	st, _ = LoadState(c.StatePath)
	if len(st.Edges) != 2 || st.Edges["e3"].State != StateActive {
		t.Fatalf("end state: %s", st.Marshal())
	}
}

// TestConvergeDryRun changes nothing, state file included, and says what
// it would do.
func TestConvergeDryRun(t *testing.T) { synctest.Test(t, testConvergeDryRun) }

func testConvergeDryRun(t *testing.T) {
	w, conv := world(t)
	conv(e1, e2).Run(context.Background())
	before, _ := LoadState(conv().StatePath)
	c := conv(e2, e3)
	c.DryRun = true
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(w.events) != 0 {
		t.Fatalf("dry run changed %q", w.events)
	}
	after, _ := LoadState(c.StatePath)
	if string(before.Marshal()) != string(after.Marshal()) {
		t.Fatalf("dry run wrote the state file:\n%s", after.Marshal())
	}
	golden(t, "converge-dry-run", c.Out.(*testbed.Buffer).String())
}

// TestConvergeNoMetrics: without a metrics endpoint a removed edge waits
// the whole drain_timeout after its TTL wait.
func TestConvergeNoMetrics(t *testing.T) { synctest.Test(t, testConvergeNoMetrics) }

func testConvergeNoMetrics(t *testing.T) {
	w, conv := world(t)
	conv(e1, e2).Run(context.Background())
	start := w.clock.Now()
	c := conv(e1)
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if waited := w.clock.Now().Sub(start); waited != 95*time.Second {
		t.Fatalf("waited %v, want TTL 60s + slack 5s + drain_timeout 30s", waited)
	}
	if !strings.Contains(c.Out.(*testbed.Buffer).String(), "e2 has no metrics endpoint: waiting drain_timeout (30s left)") {
		t.Fatalf("output:\n%s", c.Out.(*testbed.Buffer).String())
	}
}

// TestReconcile: the state's view of each edge from the inventory and the
// live DNS set.
func TestReconcile(t *testing.T) {
	st := NewState()
	st.Edges["e1"] = &EdgeState{IPv4: "192.0.2.1", State: StateActive}
	st.Edges["gone"] = &EdgeState{IPv4: "192.0.2.9", State: StateActive}
	st.Edges["never"] = &EdgeState{IPv4: "192.0.2.8", State: StateFailed}
	cfg := validConfig()
	// e1 is re-addressed; e2 is published; e3 is new.
	cfg.Edges = []Edge{{Name: "e1", IPv4: "192.0.2.11"}, e2, e3}
	live := RRSet{A: addrs("192.0.2.1", "192.0.2.2", "192.0.2.9")}
	Reconcile(cfg, st, live)
	want := map[string]string{"e1": StateNew, "e1.old": StateDraining, "e2": StateActive, "e3": StateNew, "gone": StateDraining}
	if len(st.Edges) != len(want) {
		t.Fatalf("state: %s", st.Marshal())
	}
	for name, state := range want {
		if s := st.Edges[name]; s == nil || s.State != state {
			t.Errorf("%s: %+v, want %s", name, s, state)
		}
	}
	if st.Edges["e1.old"].IPv4 != "192.0.2.1" || st.Edges["e1"].IPv4 != "192.0.2.11" {
		t.Errorf("re-addressed e1: %s", st.Marshal())
	}
}

type fakeAllowed map[netip.Addr]bool

func (f fakeAllowed) Allow([]Edge) (bool, error)            { return false, nil }
func (f fakeAllowed) Allowed() (map[netip.Addr]bool, error) { return f, nil }

// TestStatus: one row per inventory edge and per draining edge, each
// column from its source.
func TestStatus(t *testing.T) {
	cfg := validConfig()
	cfg.Edges = []Edge{e2, e3, {Name: "e4", IPv4: "192.0.2.4"}}
	st := NewState()
	st.Edges["e1"] = &EdgeState{IPv4: "192.0.2.1", Metrics: "192.0.2.1:9101", State: StateDraining}
	live := RRSet{A: addrs("192.0.2.2", "192.0.2.3")}
	fw := fakeAllowed{netip.MustParseAddr("192.0.2.1"): true, netip.MustParseAddr("192.0.2.2"): true, netip.MustParseAddr("192.0.2.3"): true, netip.MustParseAddr("2001:db8::3"): true}
	probe := func(_ context.Context, addr string) ProbeResult {
		if addr == "192.0.2.4:636" {
			return ProbeResult{Error: "tcp connect 192.0.2.4:636: connection refused"}
		}
		return ProbeResult{OK: true, HandshakeMS: 3.25}
	}
	conns := func(context.Context, string) (int, error) { return 2, nil }
	var b strings.Builder
	PrintStatus(&b, Status(context.Background(), cfg, st, live, fw, probe, conns))
	golden(t, "status", b.String())
}

// TestConvergeRefusedKey: a key the DNS server refuses stops the run
// before the firewall or anything else changes.
func TestConvergeRefusedKey(t *testing.T) { synctest.Test(t, testConvergeRefusedKey) }

func testConvergeRefusedKey(t *testing.T) {
	w, conv := world(t)
	conv(e1, e2).Run(context.Background())
	w.checkErr = errors.New("dns: check update rights on 192.0.2.53:53 for ldap.example.net.: REFUSED")
	c := conv(e2, e3)
	if err := c.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "REFUSED") {
		t.Fatalf("err = %v", err)
	}
	if len(w.events) != 0 {
		t.Fatalf("a refused key still changed %q", w.events)
	}
}

// TestConvergeReaddress: an edge whose address changes is published on the
// new one first; the old one drains as "<name>.old" and is then dropped.
func TestConvergeReaddress(t *testing.T) { synctest.Test(t, testConvergeReaddress) }

func testConvergeReaddress(t *testing.T) {
	w, conv := world(t)
	conv(e1, e2).Run(context.Background())
	moved := e1
	moved.IPv4 = "192.0.2.11"
	w.conns = []int{0}
	if err := conv(moved, e2).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"firewall e1 e1.old e2", "probe 192.0.2.11:636", "dns add A 192.0.2.11 (e1)", "dns remove A 192.0.2.1 (e1.old)",
		"conns 192.0.2.1:9101 = 0", "firewall e1 e2",
	}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(w.events, "\n"), strings.Join(want, "\n"))
	}
}

// TestConvergePartialReaddress: an edge that loses only its IPv6 address
// keeps its IPv4 one published and allowed; the IPv6 one alone drains (as
// "<name>.old"), with the full TTL wait.
func TestConvergePartialReaddress(t *testing.T) { synctest.Test(t, testConvergePartialReaddress) }

func testConvergePartialReaddress(t *testing.T) {
	w, conv := world(t)
	w.dns.AAAA, w.dns.TTLAAAA = addrs("2001:db8::3"), 60
	w.dns.A = append(w.dns.A, netip.MustParseAddr("192.0.2.3"))
	conv(e1, e2, e3).Run(context.Background())
	w.events = nil
	v4only := e3
	v4only.IPv6 = ""
	start := w.clock.Now()
	if err := conv(e1, e2, v4only).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	// e3 keeps a published address: no probe, no addition.
	want := []string{"firewall e1 e2 e3 e3.old", "dns remove AAAA 2001:db8::3 (e3.old)", "firewall e1 e2 e3"}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(w.events, "\n"), strings.Join(want, "\n"))
	}
	if waited := w.clock.Now().Sub(start); waited < 95*time.Second {
		t.Fatalf("waited %v, want TTL 60s + slack 5s + drain_timeout 30s (no metrics)", waited)
	}
}

// TestConvergeReaddressTwice: an edge re-addressed again while its first
// old address still drains (a run interrupted in step 5) keeps both old
// addresses allowed, each under its own name, until each one's own TTL
// and drain are over; the first one's state entry is not lost.
func TestConvergeReaddressTwice(t *testing.T) { synctest.Test(t, testConvergeReaddressTwice) }

func testConvergeReaddressTwice(t *testing.T) {
	w, conv := world(t)
	moved := readdressInterrupted(t, w, conv)
	moved.IPv4 = "192.0.2.21"
	w.conns = []int{0}
	c := conv(moved, e2)
	allowed := recordAllowed(c)
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantAllowed := []string{
		"e1.old2=192.0.2.11 e1.old=192.0.2.1 e1=192.0.2.21 e2=192.0.2.2", // step 1: both old addresses still in
		"e1=192.0.2.21 e2=192.0.2.2",
	}
	if !slices.Equal(*allowed, wantAllowed) {
		t.Fatalf("the firewall allowed:\n%s\nwant:\n%s", strings.Join(*allowed, "\n"), strings.Join(wantAllowed, "\n"))
	}
	want := []string{
		"firewall e1 e1.old e1.old2 e2", "probe 192.0.2.21:636", "dns add A 192.0.2.21 (e1)", "dns remove A 192.0.2.11 (e1.old2)",
		"conns 192.0.2.1:9101 = 0", "conns 192.0.2.1:9101 = 0", "firewall e1 e2",
	}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(w.events, "\n"), strings.Join(want, "\n"))
	}
}

// readdressInterrupted converges e1 and e2, then moves e1 to 192.0.2.11
// and interrupts that run while 192.0.2.1 drains under "e1.old"; it
// returns the moved e1 and clears the events.
func readdressInterrupted(t *testing.T, w *fakeWorld, conv func(edges ...Edge) *Converger) Edge {
	t.Helper()
	conv(e1, e2).Run(context.Background())
	moved := e1
	moved.IPv4 = "192.0.2.11"
	ctx, cancel := context.WithCancel(context.Background())
	c := conv(moved, e2)
	c.Conns = func(context.Context, string) (int, error) {
		cancel()
		return 1, nil
	}
	if err := c.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("the first re-addressing: %v, want interrupted", err)
	}
	w.events = nil
	return moved
}

// recordAllowed makes c's firewall record, for each Allow, the edges
// with their IPv4 addresses ("e1=192.0.2.1 e2=192.0.2.2").
func recordAllowed(c *Converger) *[]string {
	var allowed []string
	fw := c.Firewall
	c.Firewall = firewallFunc(func(edges []Edge) (bool, error) {
		var s []string
		for _, e := range edges {
			s = append(s, e.Name+"="+e.IPv4)
		}
		slices.Sort(s)
		allowed = append(allowed, strings.Join(s, " "))
		return fw.Allow(edges)
	})
	return &allowed
}

type firewallFunc func(edges []Edge) (bool, error)

func (f firewallFunc) Allow(edges []Edge) (bool, error)      { return f(edges) }
func (f firewallFunc) Allowed() (map[netip.Addr]bool, error) { return nil, nil }

// TestConvergeReaddressBack: an edge moved back to the address that still
// drains under "<name>.old" publishes it again at once: that entry is
// dropped (nothing to wait for: the firewall keeps the address), and only
// the address it leaves drains.
func TestConvergeReaddressBack(t *testing.T) { synctest.Test(t, testConvergeReaddressBack) }

func testConvergeReaddressBack(t *testing.T) {
	w, conv := world(t)
	readdressInterrupted(t, w, conv)
	w.conns = []int{0}
	c := conv(e1, e2)
	allowed := recordAllowed(c)
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantAllowed := []string{"e1.old=192.0.2.11 e1=192.0.2.1 e2=192.0.2.2", "e1=192.0.2.1 e2=192.0.2.2"}
	if !slices.Equal(*allowed, wantAllowed) {
		t.Fatalf("the firewall allowed:\n%s\nwant:\n%s", strings.Join(*allowed, "\n"), strings.Join(wantAllowed, "\n"))
	}
	want := []string{ // the fake logs a firewall change of names only
		"probe 192.0.2.1:636", "dns add A 192.0.2.1 (e1)", "dns remove A 192.0.2.11 (e1.old)",
		"conns 192.0.2.1:9101 = 0", "firewall e1 e2",
	}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(w.events, "\n"), strings.Join(want, "\n"))
	}
}
