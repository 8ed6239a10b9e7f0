package deploy

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// history replays checks (true: passed) into a Health.
func history(edge string, withdrawn bool, checks ...bool) Health {
	h := Health{Edge: edge, Withdrawn: withdrawn}
	for _, ok := range checks {
		h.Record(ok, "refused")
	}
	return h
}

// rechecking is the history of a withdrawn edge let in for its
// rechecks.
func rechecking(edge string, checks ...bool) Health {
	h := history(edge, true, checks...)
	h.Rechecking = true
	return h
}

func ops(d Decision) []string {
	var s []string
	for _, a := range d.Actions {
		s = append(s, a.Op+" "+a.Edge)
	}
	return s
}

func TestDecideFallRiseMinEdges(t *testing.T) {
	w := DefaultWatch() // fall 3, rise 2, min_edges 2
	F, P := false, true
	cases := []struct {
		name  string
		inv   int
		edges []Health
		want  []string
		all   bool
	}{
		{"two failures are not enough", 3, []Health{history("e1", false, P, F, F), history("e2", false, P), history("e3", false, P)}, nil, false},
		{"fall failures in a row withdraw", 3, []Health{history("e1", false, F, F, F), history("e2", false, P), history("e3", false, P)}, []string{"withdraw e1"}, false},
		{"a pass resets the failures", 3, []Health{history("e1", false, F, F, P, F, F), history("e2", false, P), history("e3", false, P)}, nil, false},
		{"never below min_edges", 3, []Health{history("e1", false, F, F, F, F), history("e2", false, F, F, F), history("e3", false, P)},
			[]string{"withdraw e1", "hold e2"}, false},
		{"min_edges is all when fewer", 1, []Health{history("e1", false, F, F, F)}, []string{"hold e1"}, true},
		{"min_edges of two with two edges", 2, []Health{history("e1", false, F, F, F), history("e2", false, P)}, []string{"hold e1"}, false},
		{"every edge failing withdraws none", 3, []Health{history("e1", false, F, F, F), history("e2", false, F, F, F), history("e3", false, F)},
			[]string{"hold e1", "hold e2"}, true},
		{"rise passes restore", 3, []Health{history("e1", true, F, P, P), history("e2", false, P), history("e3", false, P)}, []string{"restore e1"}, false},
		{"a flapping edge stays out", 3, []Health{history("e1", true, P, F, P, F, P), history("e2", false, P), history("e3", false, P)}, nil, false},
		{"a restoration makes room for a withdrawal", 3, []Health{history("e1", true, P, P), history("e2", false, F, F, F), history("e3", false, P)},
			[]string{"restore e1", "withdraw e2"}, false},
		{"a failed recheck drops", 3, []Health{rechecking("e1", F), history("e2", false, P), history("e3", false, P)}, []string{"drop e1"}, false},
		{"a passed recheck keeps it let in", 3, []Health{rechecking("e1", P), history("e2", false, P), history("e3", false, P)}, nil, false},
		{"rise passed rechecks restore", 3, []Health{rechecking("e1", P, P), history("e2", false, P), history("e3", false, P)}, []string{"restore e1"}, false},
		{"every edge failing drops no recheck", 3, []Health{rechecking("e1", F), history("e2", false, F), history("e3", false, F)}, nil, true},
		{"a leaving edge failing is not dropped", 3, []Health{history("e1", true, F, F, F, F), history("e2", false, P), history("e3", false, P)}, nil, false},
		{"unchecked edges are not counted", 3, []Health{{Edge: "e1"}, history("e2", false, F, F, F), history("e3", false, P)}, []string{"withdraw e2"}, false},
	}
	for _, c := range cases {
		d := Decide(w, c.inv, c.edges)
		if got := ops(d); !reflect.DeepEqual(got, c.want) || d.AllFailing != c.all {
			t.Errorf("%s: %v all_failing=%v, want %v all_failing=%v", c.name, got, d.AllFailing, c.want, c.all)
		}
	}
	d := Decide(w, 3, []Health{history("e1", false, F, F, F), history("e2", false, P), history("e3", false, P)})
	if a := d.Actions[0]; a.Reason != "3 failed checks" || a.LastErr != "refused" {
		t.Errorf("withdraw action %+v", a)
	}
}

// TestPauseFullJitter: each pause is uniform in [0, interval] raised to
// the floor (1 s, or the interval when shorter): never below the floor,
// never above the interval, and its mean interval/2 + floor²/(2·interval),
// over draws of a seeded source.
func TestPauseFullJitter(t *testing.T) {
	for _, c := range []struct {
		interval, floor time.Duration
	}{{30 * time.Second, time.Second}, {5 * time.Second, time.Second}, {200 * time.Millisecond, 200 * time.Millisecond}} {
		w := Watch{Interval: c.interval}
		if got := w.Pause(func() float64 { return 0 }); got != c.floor {
			t.Errorf("interval %v: Pause(0) = %v, want the floor %v", c.interval, got, c.floor)
		}
		if got := w.Pause(func() float64 { return math.Nextafter(1, 0) }); got != c.interval {
			t.Errorf("interval %v: Pause(1-ε) = %v, want %v", c.interval, got, c.interval)
		}
		src := rand.New(rand.NewPCG(1, 2))
		const n = 200000
		var sum float64
		for range n {
			p := w.Pause(src.Float64)
			if p < c.floor || p > c.interval {
				t.Fatalf("interval %v: pause %v outside [%v, %v]", c.interval, p, c.floor, c.interval)
			}
			sum += p.Seconds()
		}
		I, f := c.interval.Seconds(), c.floor.Seconds()
		want := I/2 + f*f/(2*I)
		if mean := sum / n; math.Abs(mean-want) > 0.01*want {
			t.Errorf("interval %v: mean pause %.4fs, want %.4fs (±1%%)", c.interval, mean, want)
		}
	}
}

func TestServingLeavesWithdrawnOut(t *testing.T) {
	cfg := Config{Edges: []Edge{{Name: "e1", IPv4: "192.0.2.1"}, {Name: "e2", IPv4: "192.0.2.2"}, {Name: "e3", IPv4: "192.0.2.3"}}}
	st := NewState()
	st.Withdraw(Edge{Name: "e2", IPv4: "192.0.2.2"}, "3 failed checks", time.Unix(0, 0))
	st.Withdraw(Edge{Name: "e3", IPv4: "192.0.2.99"}, "re-addressed since", time.Unix(0, 0))
	st.Withdraw(Edge{Name: "e9", IPv4: "192.0.2.9"}, "rotated out since", time.Unix(0, 0))
	got := Serving(cfg, st)
	if edgeNames(got.Edges) != "e1 e3" || len(cfg.Edges) != 3 {
		t.Errorf("serving %s (inventory %d edges)", edgeNames(got.Edges), len(cfg.Edges))
	}
	if _, ok := st.Withdrawn["e2"]; !ok || len(st.Withdrawn) != 1 {
		t.Errorf("withdrawals kept: %v", st.Withdrawn)
	}
	b := st.Marshal()
	back, err := ParseState(b)
	if err != nil || !back.IsWithdrawn(cfg.Edges[1]) {
		t.Errorf("state round trip: %v\n%s", err, b)
	}
}

func TestBackoffDoublesToThirtyMinutes(t *testing.T) {
	var got []time.Duration
	for n := 1; n <= 9; n++ {
		got = append(got, Backoff(30*time.Second, 30*time.Minute, n))
	}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("back-off %v, want %v", got, want)
	}
}

func TestParseReplacement(t *testing.T) {
	e, err := ParseReplacement([]byte(`{"name": "e7", "ipv4": "192.0.2.7", "ipv6": "2001:db8::7", "ssh": "root@192.0.2.7", "host_key": "ssh-ed25519 AAAA"}` + "\n"))
	if err != nil || e.String() != "e7=192.0.2.7,2001:db8::7" || e.SSH != "root@192.0.2.7" || e.HostKey != "ssh-ed25519 AAAA" {
		t.Errorf("ParseReplacement: %+v %v", e, err)
	}
	for _, bad := range []string{``, `not json`, `{"name": "e7"}`, `{"name": "-", "ipv4": "192.0.2.7"}`, `{"name": "e7", "ipv4": "2001:db8::7"}`,
		`{"name": "e7", "ipv4": "192.0.2.7", "zone": "x"}`, `{"name": "e7", "ipv4": "192.0.2.7"} {"name": "e8", "ipv4": "192.0.2.8"}`} {
		if _, err := ParseReplacement([]byte(bad)); err == nil {
			t.Errorf("ParseReplacement(%q): no error", bad)
		}
	}
}

// TestRecheckBackoffDoublesToTenMinutes: a recheck after the first drop
// is due one interval later, then twice that after each failed one, up to
// 10 minutes.
func TestRecheckBackoffDoublesToTenMinutes(t *testing.T) {
	var got []time.Duration
	for n := 0; n <= 6; n++ {
		got = append(got, RecheckBackoff(30*time.Second, n))
	}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("recheck back-off %v, want %v", got, want)
	}
}

// TestWithdrawalPhases runs a withdrawal through its phases on the fake
// fleet and clock, as fleet watch drives them (Defer): e3 leaves DNS and
// stays let in; only once TTL + slack passed, and its drain, the firewall
// drops it; apply then neither opens nor publishes it; a due recheck lets
// it in, a failed one drops it again with its back-off doubled; rise
// passed checks restore it (probe, then DNS).
func TestWithdrawalPhases(t *testing.T) { synctest.Test(t, testWithdrawalPhases) }

func testWithdrawalPhases(t *testing.T) {
	w, conv := world(t)
	ctx := context.Background()
	run := func(deferred bool, want ...string) {
		t.Helper()
		w.events = nil
		c := conv(e1, e2, e3)
		c.Defer = deferred
		if err := c.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(w.events, want) {
			t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(w.events, "\n"), strings.Join(want, "\n"))
		}
	}
	c := conv(e1, e2, e3)
	edit := func(f func(st *State)) *State {
		t.Helper()
		st, err := LoadState(c.StatePath)
		if err != nil {
			t.Fatal(err)
		}
		f(st)
		if err := st.Save(c.StatePath); err != nil {
			t.Fatal(err)
		}
		return st
	}
	phase := func() Withdrawal {
		t.Helper()
		st, _ := LoadState(c.StatePath)
		return st.Withdrawn["e3"]
	}
	cfg := c.Config
	interval := cfg.Watch.Interval
	run(false, "firewall e1 e2 e3", "probe 192.0.2.3:636", "probe [2001:db8::3]:636", "dns add A 192.0.2.3 (e3)", "dns add AAAA 2001:db8::3 (e3)")

	edit(func(st *State) { st.Withdraw(e3, "3 failed checks", w.clock.Now()) })
	run(true, "dns remove A 192.0.2.3 (e3)", "dns remove AAAA 2001:db8::3 (e3)")
	left := w.clock.Now()
	if p := phase(); p.Phase() != PhaseLeaving || !p.LeftDNS.Equal(left) || p.TTL != 60 {
		t.Fatalf("after leaving DNS: %+v", p)
	}
	run(true) // resolvers may hold it: still let in
	time.Sleep(64 * time.Second)
	st := edit(func(*State) {})
	if due := DropDue(cfg, st, 5*time.Second, w.clock.Now()); len(due) != 0 {
		t.Fatalf("drop due after 64s of TTL 60s + slack 5s: %v", due)
	}
	time.Sleep(time.Second)
	if due := DropDue(cfg, st, 5*time.Second, w.clock.Now()); !slices.Equal(due, []string{"e3"}) {
		t.Fatalf("drop due after 65s: %v", due)
	}
	run(true, "firewall e1 e2") // after drain_timeout: e3 has no metrics endpoint
	out := phase()
	if out.Phase() != PhaseOut || out.FirewalledOut.Sub(left) < 65*time.Second+cfg.DrainTimeout || !out.NextCheck.Equal(out.FirewalledOut.Add(interval)) {
		t.Fatalf("after the drop: %+v (left DNS %v)", out, left)
	}

	run(false) // apply: neither opens nor publishes a withdrawn edge out of the firewall
	if due := RecheckDue(cfg, edit(func(*State) {}), w.clock.Now()); len(due) != 0 {
		t.Fatalf("recheck due before its time: %v", due)
	}
	for i, wait := range []time.Duration{interval, 2 * interval, 4 * interval} {
		time.Sleep(wait)
		st := edit(func(*State) {})
		due := RecheckDue(cfg, st, w.clock.Now())
		if len(due) != 1 || due[0].Name != "e3" {
			t.Fatalf("recheck %d not due after %v: %v", i+1, wait, due)
		}
		edit(func(st *State) { st.Recheck("e3") })
		run(true, "firewall e1 e2 e3")
		run(false) // apply leaves a rechecking edge let in, and unpublished
		d := Decide(cfg.Watch, 3, []Health{history("e1", false, true), history("e2", false, true), {Edge: "e3", Withdrawn: true, Rechecking: true, Fails: 1, LastErr: "refused"}})
		if ops(d)[0] != "drop e3" {
			t.Fatalf("a failed recheck: %v", ops(d))
		}
		edit(func(st *State) { st.RecheckFailed("e3", interval, w.clock.Now()) })
		run(true, "firewall e1 e2")
		if p := phase(); p.NextCheck.Sub(p.FirewalledOut) != RecheckBackoff(interval, i+1) || p.FailedRechecks != i+1 {
			t.Fatalf("after failed recheck %d: %+v", i+1, p)
		}
	}

	time.Sleep(8 * interval)
	edit(func(st *State) { st.Recheck("e3") })
	run(true, "firewall e1 e2 e3")
	d := Decide(cfg.Watch, 3, []Health{history("e1", false, true), history("e2", false, true), history("e3", true, true, true)})
	if !slices.Equal(ops(d), []string{"restore e3"}) {
		t.Fatalf("rise passed rechecks: %v", ops(d))
	}
	edit(func(st *State) { st.Restore("e3") })
	run(true, "probe 192.0.2.3:636", "probe [2001:db8::3]:636", "dns add A 192.0.2.3 (e3)", "dns add AAAA 2001:db8::3 (e3)")
}

// TestApplyFinishesWithdrawal: apply (no Defer) run on a withdrawal the
// watch left leaving takes the edge out of DNS, waits for it as for a
// removed edge, and drops it; a run killed after that drop and before its
// save records it as out next time, and never lets it in again.
func TestApplyFinishesWithdrawal(t *testing.T) { synctest.Test(t, testApplyFinishesWithdrawal) }

func testApplyFinishesWithdrawal(t *testing.T) {
	w, conv := world(t)
	ctx := context.Background()
	c := conv(e1, e2, e3)
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := LoadState(c.StatePath)
	st.Withdraw(e3, "3 failed checks", w.clock.Now())
	st.Save(c.StatePath)
	saved := st.Marshal()
	w.events = nil
	start := w.clock.Now()
	if err := conv(e1, e2, e3).Run(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"dns remove A 192.0.2.3 (e3)", "dns remove AAAA 2001:db8::3 (e3)", "firewall e1 e2"}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events %q, want %q", w.events, want)
	}
	if waited := w.clock.Now().Sub(start); waited < 65*time.Second {
		t.Errorf("dropped after %v, want TTL 60s + slack 5s at least", waited)
	}
	st, _ = LoadState(c.StatePath)
	if st.Withdrawn["e3"].Phase() != PhaseOut {
		t.Fatalf("after apply: %+v", st.Withdrawn["e3"])
	}

	// Killed after the drop, before the save: the state says leaving,
	// past its wait; the live rules no longer let it in.
	st, _ = ParseState(saved)
	st.update("e3", func(x *Withdrawal) { x.LeftDNS, x.TTL = start, 60 })
	st.Save(c.StatePath)
	w.events = nil
	c = conv(e1, e2, e3)
	c.Defer = true
	if err := c.Run(ctx); err != nil || len(w.events) != 0 {
		t.Fatalf("rerun after a kill past the drop: %v, events %q", err, w.events)
	}
	if st, _ = LoadState(c.StatePath); st.Withdrawn["e3"].Phase() != PhaseOut {
		t.Fatalf("after the rerun: %+v", st.Withdrawn["e3"])
	}
}

// TestServingDrainsWithdrawnLeftInventory: a withdrawn edge that leaves
// fleet.yaml (rotated out) while the firewall still lets it in drains as
// a removed edge, from when it left DNS; one already out of the firewall
// is simply forgotten.
func TestServingDrainsWithdrawnLeftInventory(t *testing.T) {
	left := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	st := NewState()
	for _, e := range []Edge{e1, e2, e3} {
		st.Edges[e.Name] = &EdgeState{IPv4: e.IPv4, IPv6: e.IPv6, State: StateNew}
	}
	st.Withdraw(e2, "3 failed checks", left)
	st.leftDNS("e2", 60, left)
	st.Withdraw(e3, "3 failed checks", left)
	st.leftDNS("e3", 60, left)
	st.firewalledOut("e3", 30*time.Second, left.Add(2*time.Minute))
	cfg := validConfig()
	cfg.Edges = []Edge{e1}
	Serving(cfg, st)
	if s := st.Edges["e2"]; s.State != StateDraining || !s.LeftDNS.Equal(left) || s.TTL != 60 {
		t.Errorf("the leaving e2 rotated out: %+v, want draining since it left DNS", s)
	}
	if s := st.Edges["e3"]; s.State != StateNew {
		t.Errorf("e3, out of the firewall, rotated out: %+v, want left as it was (Reconcile forgets it)", s)
	}
	if len(st.Withdrawn) != 0 {
		t.Errorf("withdrawals kept: %v", st.Withdrawn)
	}
}
