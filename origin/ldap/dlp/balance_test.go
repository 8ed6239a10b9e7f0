package dlp_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
)

// balancers parses lbFile(objects...) and runs its balancers on a clock
// the test moves.
func balancers(t *testing.T, objects ...string) (*dlp.Balancers, *dlp.Health, *dlp.Load, *testbed.Clock) {
	t.Helper()
	f, err := dlp.Parse("x.json", []byte(lbFile(objects...)))
	if err != nil {
		t.Fatal(err)
	}
	clock := testbed.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := dlp.NewHealth(time.Minute, clock.Now)
	l := dlp.NewLoad(f, clock.Now)
	return dlp.NewBalancers(f, h, l), h, l, clock
}

func first(t *testing.T, bs *dlp.Balancers, lb string, op dlp.Op) string {
	t.Helper()
	c := bs.Select(lb, op)
	if len(c) == 0 {
		return ""
	}
	return c[0]
}

// Seed 003, figure 5-3/5-4: weights per operation type, 0 = never,
// unlisted types shared equally; the split over 3,000 operations is exact
// (smooth weighted round robin is deterministic).
func TestProportionalSplit(t *testing.T) {
	bs, h, _, _ := balancers(t, `{"object": "LoadBalancer", "name": "LB", "algorithm": "proportional", "routes": [
    {"server": "L1", "weight": {"search": 2, "bind": 1}},
    {"server": "L2", "weight": {"search": 1, "bind": 0}},
    {"server": "L3", "weight": {"search": 1, "bind": 0}}]}`)
	count := func(op string) map[string]int {
		n := map[string]int{}
		for range 3000 {
			n[first(t, bs, "LB", dlp.Op{Type: op})]++
		}
		return n
	}
	for op, want := range map[string]map[string]int{
		"search":  {"L1": 1500, "L2": 750, "L3": 750},
		"bind":    {"L1": 3000},
		"compare": {"L1": 1000, "L2": 1000, "L3": 1000},
	} {
		if got := count(op); !equalCounts(got, want) {
			t.Errorf("%s: %v, want %v", op, got, want)
		}
	}
	// Interleaved, as the smooth variant promises (not L1 L1 L2 L3): 3,000
	// is a whole number of periods, so the counters are back at zero.
	seq := ""
	for range 8 {
		seq += first(t, bs, "LB", dlp.Op{Type: "search"})[1:]
	}
	if seq != "12311231" {
		t.Errorf("search sequence %s, want 12311231", seq)
	}
	// A route that is down leaves the split to the others; the failover
	// order lists every other route with a weight.
	h.Fail("L1")
	if got := count("search"); !equalCounts(got, map[string]int{"L2": 1500, "L3": 1500}) {
		t.Errorf("search with L1 down: %v", got)
	}
	if got := bs.Select("LB", dlp.Op{Type: "bind"}); len(got) != 0 {
		t.Errorf("bind with L1 down: %v; weight 0 means never", got)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Seed 003, figure 5-1: adds to server 1, binds to server 2; server 1
// down → adds go to the next priority; back up → without switchback they
// stay, with switchback they return.
func TestFailoverByOperationType(t *testing.T) {
	for _, switchback := range []bool{false, true} {
		sb := "0"
		if switchback {
			sb = "1"
		}
		bs, h, _, _ := balancers(t, `{"object": "LoadBalancer", "name": "LB", "algorithm": "failover", "switchback": `+sb+`, "routes": [
    {"server": "L1", "priority": {"add": 1, "bind": 2, "default": 1}},
    {"server": "L2", "priority": {"add": 2, "bind": 1, "default": 2}},
    {"server": "L3", "priority": 3}]}`)
		step := func(what, op string, want ...string) {
			t.Helper()
			got := bs.Select("LB", dlp.Op{Type: op})
			if len(got) != len(want) || (len(want) > 0 && got[0] != want[0]) {
				t.Errorf("switchback %v, %s: %s → %v, want %v", switchback, what, op, got, want)
			}
		}
		step("all up", "add", "L1", "L2", "L3")
		step("all up", "bind", "L2", "L1", "L3")
		h.Fail("L1")
		step("L1 down", "add", "L2", "L3")
		step("L1 down", "bind", "L2", "L3")
		h.Succeed("L1")
		if switchback {
			step("L1 back", "add", "L1", "L2", "L3")
		} else {
			step("L1 back", "add", "L2", "L1", "L3")
			h.Fail("L2")
			step("L2 down", "add", "L1", "L3")
			h.Succeed("L2")
			step("L2 back", "add", "L1", "L2", "L3")
		}
		step("unlisted priority", "search", "L1", "L2", "L3")
	}
}

// inFlight sets server's operations in flight to n.
func inFlight(l *dlp.Load, server string, n int) {
	for l.InFlight(server) < n {
		l.Begin(server)
	}
	for l.InFlight(server) > n {
		l.End(server)
	}
}

// Saturation is in flight ÷ capacity, smoothed with the monitoring
// interval as time constant.
func TestLoadSmoothing(t *testing.T) {
	_, _, l, clock := balancers(t, `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": [{"server": "L1", "capacity": 10}]}`)
	inFlight(l, "L1", 5)
	if s := l.Saturation("L1"); s != 0 {
		t.Errorf("saturation %v before any time passed", s)
	}
	clock.Advance(10 * time.Second) // one MonitorInterval
	if s, want := l.Saturation("L1"), 50*(1-math.Exp(-1)); math.Abs(s-want) > 1e-9 {
		t.Errorf("after one interval: %v, want %v", s, want)
	}
	clock.Advance(time.Hour)
	if s := l.Saturation("L1"); math.Abs(s-50) > 1e-9 {
		t.Errorf("settled: %v, want 50", s)
	}
	inFlight(l, "L1", 30)
	clock.Advance(time.Hour)
	if s := l.Saturation("L1"); s != 100 {
		t.Errorf("over capacity: %v, want 100", s)
	}
}

// Optimal: the least saturated route; within the precision the route in
// use keeps the traffic (no flapping), past it the traffic moves; a down
// route counts 100 %.
func TestOptimalPrecision(t *testing.T) {
	bs, h, l, clock := balancers(t, `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": [
    {"server": "L1", "capacity": 100}, {"server": "L2", "capacity": 100}, {"server": "L3", "capacity": 100}]}`)
	settle := func(l1, l2, l3 int) {
		inFlight(l, "L1", l1)
		inFlight(l, "L2", l2)
		inFlight(l, "L3", l3)
		clock.Advance(time.Hour)
	}
	for _, s := range []struct {
		l1, l2, l3 int
		want       string
	}{
		{0, 0, 0, "L1"},
		{4, 0, 2, "L1"},  // 4 points above L2: within the precision
		{5, 0, 2, "L1"},  // exactly 5: still within
		{6, 0, 2, "L2"},  // past it: the least saturated
		{6, 3, 0, "L2"},  // L3 is 3 below: stays
		{6, 7, 0, "L3"},  // 7 below: moves
		{0, 10, 4, "L3"}, // L1 4 below L3: stays
	} {
		settle(s.l1, s.l2, s.l3)
		if got := first(t, bs, "LB", dlp.Op{Type: "search"}); got != s.want {
			t.Errorf("in flight %d/%d/%d: %s, want %s", s.l1, s.l2, s.l3, got, s.want)
		}
	}
	h.Fail("L3")
	if got := bs.Select("LB", dlp.Op{Type: "search"}); len(got) != 2 || got[0] != "L1" {
		t.Errorf("L3 down: %v, want L1 then L2", got)
	}
}

// Saturation: the preferred route until it reaches the threshold, then
// the next priority; back as soon as it drops below; all saturated →
// the least saturated. The alert fires once per crossing.
func TestSaturationThreshold(t *testing.T) {
	bs, _, l, clock := balancers(t, `{"object": "LoadBalancer", "name": "LB", "algorithm": "saturation", "threshold": 70, "alert": 60, "routes": [
    {"server": "L1", "priority": 1, "capacity": 100}, {"server": "L2", "priority": 2, "capacity": 100}, {"server": "L3", "priority": 3, "capacity": 100}]}`)
	var alerts []string
	bs.Alert = func(lb, server string, sat float64) { alerts = append(alerts, lb+"/"+server) }
	for i, s := range []struct {
		l1, l2, l3 int
		want       string
		alerts     int
	}{
		{0, 0, 0, "L1", 0},
		{65, 0, 0, "L1", 1},  // past the alert, below the threshold
		{69, 0, 0, "L1", 1},  // still above the alert: no second alert
		{70, 0, 0, "L2", 1},  // at the threshold: next priority
		{70, 60, 0, "L2", 2}, // L2 alerts
		{70, 75, 0, "L3", 2},
		{55, 75, 0, "L1", 2},  // L1 below again: back at once, before L2 drops
		{80, 90, 70, "L3", 4}, // all saturated: the least; L1 crossed again (it was below), L3 crossed
		{61, 0, 0, "L1", 4},   // L1 stayed above the alert level; L2 and L3 dropped below
		{61, 65, 0, "L1", 5},  // L2 crosses again
	} {
		inFlight(l, "L1", s.l1)
		inFlight(l, "L2", s.l2)
		inFlight(l, "L3", s.l3)
		clock.Advance(time.Hour)
		if got := first(t, bs, "LB", dlp.Op{Type: "add"}); got != s.want {
			t.Errorf("step %d (%d/%d/%d): %s, want %s", i, s.l1, s.l2, s.l3, got, s.want)
		}
		if len(alerts) != s.alerts {
			t.Errorf("step %d: alerts %v, want %d", i, alerts, s.alerts)
		}
	}
}

// Seed 003, figure 5-6: uid → server 1, cn → server 2, the rest through
// the pass-through server 3; mail is prohibited on server 1; other
// operations by priority.
func TestSearchFilterRoutes(t *testing.T) {
	bs, h, _, _ := balancers(t, `{"object": "LoadBalancer", "name": "LB", "algorithm": "searchfilter", "routes": [
    {"server": "L1", "priority": 1, "allowed": ["uid"], "prohibited": ["mail"]},
    {"server": "L2", "priority": 2, "allowed": ["cn"]},
    {"server": "L3", "priority": 3}]}`)
	for _, c := range []struct {
		op    string
		attrs []string
		want  []string
	}{
		{"search", []string{"uid"}, []string{"L1", "L3"}},
		{"search", []string{"cn"}, []string{"L2", "L3"}},
		{"search", []string{"uid", "mail"}, []string{"L3"}},
		{"search", []string{"uid", "cn"}, []string{"L1", "L2", "L3"}},
		{"search", []string{"objectclass"}, []string{"L3"}},
		{"bind", nil, []string{"L1", "L2", "L3"}},
	} {
		if got := bs.Select("LB", dlp.Op{Type: c.op, FilterAttrs: c.attrs}); !equalList(got, c.want) {
			t.Errorf("%s %v: %v, want %v", c.op, c.attrs, got, c.want)
		}
	}
	h.Fail("L3")
	if got := bs.Select("LB", dlp.Op{Type: "search", FilterAttrs: []string{"sn"}}); len(got) != 0 {
		t.Errorf("no match and the pass-through down: %v", got)
	}
}

func equalList(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Every configuration example of docs/balancers.md loads, and its
// balancer does what the text beside it says.
func TestBalancersDoc(t *testing.T) {
	blocks := testbed.DocBlocks(t, "docs/balancers.md", "jsonc")
	if len(blocks) != 5 {
		t.Fatalf("%d jsonc examples, want one per algorithm", len(blocks))
	}
	clock := testbed.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	split := func(bs *dlp.Balancers, lb, op string, n int) map[string]int {
		out := map[string]int{}
		for range n {
			out[first(t, bs, lb, dlp.Op{Type: op})]++
		}
		return out
	}
	for i, src := range blocks {
		f, err := dlp.Parse("balancers.md", []byte(src))
		if err != nil {
			t.Fatalf("example %d:\n%v", i+1, err)
		}
		h := dlp.NewHealth(f.Defaults.OfflineRetryTimeout, clock.Now)
		bs := dlp.NewBalancers(f, h, dlp.NewLoad(f, clock.Now))
		if len(f.Balancers) != 1 {
			t.Fatalf("example %d has %d balancers", i+1, len(f.Balancers))
		}
		for name, lb := range f.Balancers {
			switch lb.Algorithm {
			case "failover":
				if a, b := first(t, bs, name, dlp.Op{Type: "add"}), first(t, bs, name, dlp.Op{Type: "bind"}); a != "LDAP1" || b != "LDAP2" {
					t.Errorf("failover example: add → %s, bind → %s", a, b)
				}
				h.Fail("LDAP1")
				if a := first(t, bs, name, dlp.Op{Type: "add"}); a != "LDAP2" {
					t.Errorf("failover example, LDAP1 down: add → %s", a)
				}
			case "optimal":
				if s := first(t, bs, name, dlp.Op{Type: "search"}); s != "LDAP1" || lb.Precision != 5 {
					t.Errorf("optimal example: %s, precision %v", s, lb.Precision)
				}
			case "proportional":
				for op, want := range map[string]map[string]int{
					"bind":   {"LDAP1": 5},
					"add":    {"LDAP1": 3, "LDAP2": 1, "LDAP3": 1},
					"search": {"LDAP1": 1, "LDAP2": 2, "LDAP3": 2},
					"delete": {"LDAP1": 1, "LDAP2": 1, "LDAP3": 1},
				} {
					n := 0
					for _, v := range want {
						n += v
					}
					if got := split(bs, name, op, n); !equalCounts(got, want) {
						t.Errorf("proportional example, %s: %v, want %v", op, got, want)
					}
				}
			case "saturation":
				if s := first(t, bs, name, dlp.Op{Type: "modify"}); s != "LDAP1" || lb.Threshold != 70 || lb.Alert != 60 {
					t.Errorf("saturation example: %s, %+v", s, lb)
				}
			case "searchfilter":
				for attrs, want := range map[string]string{"uid": "LDAP1", "cn": "LDAP2", "uid mail": "LDAP3", "sn": "LDAP3"} {
					if s := first(t, bs, name, dlp.Op{Type: "search", FilterAttrs: strings.Fields(attrs)}); s != want {
						t.Errorf("searchfilter example: (%s) → %s, want %s", attrs, s, want)
					}
				}
			}
		}
		var balanced bool
		for _, r := range f.Rules {
			balanced = balanced || r.Balance != ""
		}
		if !balanced {
			t.Errorf("example %d has no balance(LB) rule", i+1)
		}
	}
}
