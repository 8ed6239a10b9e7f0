package deploy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/miekg/dns"
)

// fakes record every change in one event log, in order.
type fakeWorld struct {
	events  []string
	dns     RRSet
	allowed []string // edge names the firewall lets in
	fw      []Edge   // the edges it lets in
	probe   map[string]ProbeResult
	conns   []int // successive answers of the metrics endpoint
	clock   interface{ Now() time.Time }
	// checkErr is what the server answers a key check.
	checkErr error
	// logRechecks logs the probes of published edges too.
	logRechecks bool
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
	case OpTTL:
		if c.Type == dns.TypeAAAA {
			d.w.dns.TTLAAAA = c.TTL
		} else {
			d.w.dns.TTLA = c.TTL
		}
	}
	d.w.log("dns %s", c.Describe())
	return nil
}

type fakeFirewall struct{ w *fakeWorld }

func names(edges []Edge) []string {
	var n []string
	for _, e := range edges {
		n = append(n, e.Name)
	}
	slices.Sort(n)
	return n
}

// rules are the edges as the fake's rules: "+ edge e1 192.0.2.1".
func rules(edges []Edge) []string {
	var r []string
	for _, e := range edges {
		for _, a := range e.Addrs() {
			r = append(r, "edge "+e.Name+" "+a.String())
		}
	}
	slices.Sort(r)
	return r
}

func (f fakeFirewall) Diff(edges []Edge) ([]string, error) {
	var d []string
	have, want := rules(f.w.fw), rules(edges)
	for _, r := range have {
		if !slices.Contains(want, r) {
			d = append(d, "- "+r)
		}
	}
	for _, r := range want {
		if !slices.Contains(have, r) {
			d = append(d, "+ "+r)
		}
	}
	return d, nil
}

// Allow logs a change of the names let in only.
func (f fakeFirewall) Allow(edges []Edge) (func() error, error) {
	n := names(edges)
	prev, prevFW := f.w.allowed, f.w.fw
	f.w.allowed, f.w.fw = n, slices.Clone(edges)
	if !slices.Equal(n, prev) {
		f.w.log("firewall %s", strings.Join(n, " "))
	}
	return func() error {
		f.w.allowed, f.w.fw = prev, prevFW
		f.w.log("firewall restored %s", strings.Join(prev, " "))
		return nil
	}, nil
}

func (f fakeFirewall) Allowed() (map[netip.Addr]bool, error) {
	m := map[netip.Addr]bool{}
	for a := range f.sources() {
		m[a] = true
	}
	return m, nil
}

func (f fakeFirewall) Sources() (map[netip.Addr]string, error) { return f.sources(), nil }

func (f fakeFirewall) sources() map[netip.Addr]string {
	m := map[netip.Addr]string{}
	for _, e := range f.w.fw {
		for _, a := range e.Addrs() {
			m[a] = e.Name
		}
	}
	return m
}

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
		fw:      []Edge{e1, e2},
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
				// The probes of published edges around a firewall change
				// are logged only with logRechecks: the event lists of
				// most tests are about the steps.
				if a, err := netip.ParseAddrPort(addr); err != nil || !w.dns.Has(a.Addr()) || w.logRechecks {
					w.log("probe %s", addr)
				}
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
	for _, line := range []string{"resolvers may hold it 1m5s more (TTL 1m0s + slack 5s)", "e1 has 1 active connection; waiting up to 30s more", "e1 has no active connection", "done: ldap.example.net. answers 192.0.2.2 192.0.2.3 2001:db8::3"} {
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
	Reconcile(cfg, st, live, nil)
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

func (f fakeAllowed) Diff([]Edge) ([]string, error)           { return nil, nil }
func (f fakeAllowed) Allow([]Edge) (func() error, error)      { return nil, nil }
func (f fakeAllowed) Allowed() (map[netip.Addr]bool, error)   { return f, nil }
func (f fakeAllowed) Sources() (map[netip.Addr]string, error) { return nil, nil }

// TestStatus: one row per inventory edge and per draining edge, each
// column from its source; REFUSED sums the rates of an edge's addresses.
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
	// e3's two addresses are summed; e4 and e1 were refused nothing.
	refused := func(context.Context) (map[netip.Addr]float64, error) {
		return map[netip.Addr]float64{netip.MustParseAddr("192.0.2.2"): 12.5, netip.MustParseAddr("192.0.2.3"): 1,
			netip.MustParseAddr("2001:db8::3"): 0.5, netip.MustParseAddr("198.51.100.1"): 900}, nil
	}
	rows, err := Status(context.Background(), cfg, st, live, fw, probe, conns, refused)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	PrintStatus(&b, rows)
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
	want := []string{ // 192.0.2.1 drains, let in: probed around the firewall change
		"probe 192.0.2.1:636", "firewall e1 e1.old e1.old2 e2", "probe 192.0.2.1:636",
		"probe 192.0.2.21:636", "dns add A 192.0.2.21 (e1)", "dns remove A 192.0.2.11 (e1.old2)",
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
	r := &recordingFirewall{Firewall: c.Firewall}
	c.Firewall = r
	return &r.allowed
}

type recordingFirewall struct {
	Firewall
	allowed []string
}

func (r *recordingFirewall) Allow(edges []Edge) (func() error, error) {
	var s []string
	for _, e := range edges {
		s = append(s, e.Name+"="+e.IPv4)
	}
	slices.Sort(s)
	r.allowed = append(r.allowed, strings.Join(s, " "))
	return r.Firewall.Allow(edges)
}

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

// TestConvergeFirewallRegression: a firewall change after which an edge
// that got through before no longer does (a wrong pin) is undone: the
// previous rules are restored and the run fails before any DNS change.
func TestConvergeFirewallRegression(t *testing.T) { synctest.Test(t, testConvergeFirewallRegression) }

func testConvergeFirewallRegression(t *testing.T) {
	w, conv := world(t)
	conv(e1, e2).Run(context.Background())
	w.logRechecks = true
	w.events = nil
	c := conv(e1, e2, e3)
	inner := c.Probe
	changed := false
	c.Probe = func(ctx context.Context, addr string) ProbeResult {
		if changed && addr == "192.0.2.2:636" {
			w.log("probe %s", addr)
			return ProbeResult{Error: "tcp connect 192.0.2.2:636: timeout"}
		}
		return inner(ctx, addr)
	}
	c.Firewall = &hookFirewall{Firewall: c.Firewall, after: func() { changed = true }}
	err := c.Run(context.Background())
	if !errors.Is(err, ErrRegression) || !strings.Contains(err.Error(), "e2 192.0.2.2:636") || !strings.Contains(err.Error(), "the previous rules are restored") {
		t.Fatalf("err = %v", err)
	}
	want := []string{"probe 192.0.2.1:636", "probe 192.0.2.2:636", "firewall e1 e2 e3", "probe 192.0.2.1:636", "probe 192.0.2.2:636", "firewall restored e1 e2"}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(w.events, "\n"), strings.Join(want, "\n"))
	}
}

type hookFirewall struct {
	Firewall
	after func()
}

func (h *hookFirewall) Allow(edges []Edge) (func() error, error) {
	undo, err := h.Firewall.Allow(edges)
	h.after()
	return undo, err
}

// TestConvergeUnlisted: with no state file, an address published in DNS
// and let in by the firewall that fleet.yaml does not list leaves by the
// safe order: DNS first, then TTL + slack and the drain, then the
// firewall — under the name its firewall rule gives.
func TestConvergeUnlisted(t *testing.T) { synctest.Test(t, testConvergeUnlisted) }

func testConvergeUnlisted(t *testing.T) {
	w, conv := world(t) // e1 and e2 published and allowed; no state file
	start := w.clock.Now()
	c := conv(e2)
	allowed := recordAllowed(c)
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"dns remove A 192.0.2.1 (e1)", "firewall e2"}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events %q, want %q", w.events, want)
	}
	if !slices.Equal(*allowed, []string{"e2=192.0.2.2"}) {
		t.Fatalf("the firewall allowed %q: e1 must stay until step 6", *allowed)
	}
	if waited := w.clock.Now().Sub(start); waited < 95*time.Second {
		t.Fatalf("waited %v, want TTL 60s + slack 5s + drain_timeout 30s", waited)
	}
}

// TestConvergeUntrustedDraining: a draining entry whose addresses are
// neither in DNS nor let in by the firewall (a state of another run, a
// run killed after step 6) is forgotten: the firewall is not opened to
// it, not even for a moment.
func TestConvergeUntrustedDraining(t *testing.T) { synctest.Test(t, testConvergeUntrustedDraining) }

func testConvergeUntrustedDraining(t *testing.T) {
	w, conv := world(t)
	conv(e1, e2).Run(context.Background())
	st, _ := LoadState(conv().StatePath)
	st.Edges["e4.old"] = &EdgeState{IPv4: "198.51.100.4", State: StateDraining, LeftDNS: w.clock.Now(), TTL: 60}
	st.Save(conv().StatePath)
	c := conv(e1, e2)
	allowed := recordAllowed(c)
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(*allowed) != 0 || len(w.events) != 0 {
		t.Fatalf("allowed %q, events %q", *allowed, w.events)
	}
	out := c.Out.(*testbed.Buffer).String()
	if strings.Contains(out, "e4.old") {
		t.Errorf("the run speaks of e4.old:\n%s", out)
	}
	st, _ = LoadState(c.StatePath)
	if st.Edges["e4.old"] != nil {
		t.Errorf("e4.old is still in the state: %s", st.Marshal())
	}
}

// TestConvergeTTLHistory: records whose TTL was lowered shortly before an
// edge left DNS may be held for the old TTL: the wait lasts until then.
func TestConvergeTTLHistory(t *testing.T) { synctest.Test(t, testConvergeTTLHistory) }

func testConvergeTTLHistory(t *testing.T) {
	w, conv := world(t)
	w.dns.TTLA = 600
	c := conv(e1, e2) // ttl: 60 in fleet.yaml: the A set is rewritten
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, _ := LoadState(c.StatePath)
	if len(st.TTLChanges) != 1 || st.TTLChanges[0].TTL != 600 {
		t.Fatalf("the TTL change is not recorded: %s", st.Marshal())
	}
	changed := w.clock.Now()
	time.Sleep(10 * time.Second)
	w.conns = []int{0}
	c = conv(e2)
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if held := changed.Add(600*time.Second + 5*time.Second); w.clock.Now().Before(held) {
		t.Fatalf("e1 left the firewall at %v, before the TTL-600 copies expire (%v)", w.clock.Now(), held)
	}
	if out := c.Out.(*testbed.Buffer).String(); !strings.Contains(out, "(the TTL 10m0s its records had until 2026-12-01T06:00:00Z + slack 5s)") {
		t.Errorf("output:\n%s", out)
	}
}

// TestConvergeDrainRefused: an edge whose metrics endpoint refuses
// connections is down: nothing is left to drain, no drain_timeout wait.
func TestConvergeDrainRefused(t *testing.T) { synctest.Test(t, testConvergeDrainRefused) }

func testConvergeDrainRefused(t *testing.T) {
	w, conv := world(t)
	conv(e1, e2).Run(context.Background())
	start := w.clock.Now()
	c := conv(e2)
	c.Conns = func(context.Context, string) (int, error) {
		return 0, fmt.Errorf("metrics http://192.0.2.1:9101/metrics: %w", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	}
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if waited := w.clock.Now().Sub(start); waited != 65*time.Second {
		t.Errorf("waited %v, want TTL 60s + slack 5s only", waited)
	}
	if out := c.Out.(*testbed.Buffer).String(); !strings.Contains(out, "e1: its metrics endpoint refuses connections: the edge is down, nothing left to drain") {
		t.Errorf("output:\n%s", out)
	}
}

// TestConvergeDrainProgress: the drain loop prints at the --progress
// interval, not at each poll; a wait of less than a second left says
// "1s more", never "0s more".
func TestConvergeDrainProgress(t *testing.T) { synctest.Test(t, testConvergeDrainProgress) }

func testConvergeDrainProgress(t *testing.T) {
	w, conv := world(t)
	conv(e1, e2).Run(context.Background())
	w.conns = []int{3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 0}
	c := conv(e2)
	c.Every = 5 * time.Second
	c.Slack = 500 * time.Millisecond
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := c.Out.(*testbed.Buffer).String()
	if n := strings.Count(out, "e1 has 3 active connections"); n != 3 {
		t.Errorf("%d progress lines for 12 polls a second apart, want 3 (every 5s):\n%s", n, out)
	}
	if strings.Contains(out, " 0s more") || !strings.Contains(out, "resolvers may hold it 1s more") {
		t.Errorf("output:\n%s", out)
	}
}

// TestConvergeBeforePublish: the hook runs once the new edges passed their
// probes, before the first DNS change — and not at all when a probe fails.
func TestConvergeBeforePublish(t *testing.T) { synctest.Test(t, testConvergeBeforePublish) }

func testConvergeBeforePublish(t *testing.T) {
	w, conv := world(t)
	conv(e1, e2).Run(context.Background())
	w.probe["192.0.2.3:636"] = ProbeResult{Error: "refused"}
	c := conv(e2, e3)
	c.BeforePublish = func() error { w.log("hook"); return nil }
	if err := c.Run(context.Background()); !errors.Is(err, ErrProbe) || slices.Contains(w.events, "hook") {
		t.Fatalf("err %v, events %q", err, w.events)
	}
	delete(w.probe, "192.0.2.3:636")
	w.events = nil
	c = conv(e2, e3)
	c.BeforePublish = func() error { w.log("hook"); return nil }
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(w.events, "hook"); i < 0 || !strings.HasPrefix(w.events[i+1], "dns add") || strings.HasPrefix(w.events[i-1], "dns") {
		t.Fatalf("events %q", w.events)
	}
}

// TestConvergeKilledAfterDrop: a run killed after step 6 (e1 dropped by
// the firewall) but before the state was saved leaves e1 draining in the
// state; the rerun does not let e1 in again, not even for a moment.
func TestConvergeKilledAfterDrop(t *testing.T) { synctest.Test(t, testConvergeKilledAfterDrop) }

func testConvergeKilledAfterDrop(t *testing.T) {
	w, conv := world(t)
	conv(e1, e2).Run(context.Background())
	// What the killed run had done: e1 out of DNS and the firewall, its
	// state entry still draining.
	w.dns.remove(netip.MustParseAddr("192.0.2.1"))
	w.allowed, w.fw = []string{"e2"}, []Edge{e2}
	st, _ := LoadState(conv().StatePath)
	st.Edges["e1"].State, st.Edges["e1"].LeftDNS, st.Edges["e1"].TTL = StateDraining, w.clock.Now(), 60
	st.Save(conv().StatePath)
	w.events = nil
	c := conv(e2)
	allowed := recordAllowed(c)
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(*allowed) != 0 || len(w.events) != 0 {
		t.Fatalf("the rerun allowed %q, events %q", *allowed, w.events)
	}
}

// TestConvergeUntrustedWarning: a new edge outside the origin's
// front.trusted_edges is named before step 1, in the plan and the run;
// the published ones are not.
func TestConvergeUntrustedWarning(t *testing.T) { synctest.Test(t, testConvergeUntrustedWarning) }

func testConvergeUntrustedWarning(t *testing.T) {
	_, conv := world(t)
	conv(e1, e2).Run(context.Background())
	for _, dry := range []bool{true, false} {
		c := conv(e2, e3)
		c.DryRun = dry
		c.Trusted = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
		c.TrustedFrom = "/etc/edgefleet/origin.yaml"
		if err := c.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		out := c.Out.(*testbed.Buffer).String()
		want := "warning: e3 2001:db8::3 outside front.trusted_edges of /etc/edgefleet/origin.yaml: the origin will not honour its PROXY headers (add it there and reload the origin first)\nstep 1/6 firewall:"
		if !strings.Contains(out, want) || strings.Contains(out, "e3 192.0.2.3 outside") {
			t.Errorf("dry run %v:\n%s", dry, out)
		}
	}
}

// TestReconcileUnlisted: addresses live in DNS or the firewall that the
// inventory and the state do not name become draining entries: named for
// their firewall rule ("<name>.old" when that name is an inventory edge's
// now), or "unlisted-<address>" for one only DNS answers.
func TestReconcileUnlisted(t *testing.T) {
	cfg := validConfig()
	cfg.Edges = []Edge{{Name: "e1", IPv4: "192.0.2.11"}, e2}
	live := RRSet{A: addrs("192.0.2.1", "192.0.2.2", "192.0.2.7"), AAAA: addrs("2001:db8::7")}
	fw := map[netip.Addr]string{
		netip.MustParseAddr("192.0.2.1"): "e1", netip.MustParseAddr("192.0.2.2"): "e2",
		netip.MustParseAddr("192.0.2.5"): "e5", netip.MustParseAddr("2001:db8::5"): "e5",
	}
	st := NewState()
	Reconcile(cfg, st, live, fw)
	want := map[string]string{
		"e1": "new 192.0.2.11 ", "e2": "active 192.0.2.2 ",
		"e1.old": "draining 192.0.2.1 ", "e5": "draining 192.0.2.5 2001:db8::5",
		"unlisted-192.0.2.7": "draining 192.0.2.7 ", "unlisted-2001-db8--7": "draining  2001:db8::7",
	}
	got := map[string]string{}
	for name, s := range st.Edges {
		got[name] = s.State + " " + s.IPv4 + " " + s.IPv6
	}
	if !maps.Equal(got, want) {
		t.Fatalf("state:\n%s\nwant %q", st.Marshal(), want)
	}
	if _, err := ParseState(st.Marshal()); err != nil {
		t.Fatalf("the state does not read back: %v", err)
	}
}
