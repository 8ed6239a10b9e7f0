package probe

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// fakeNet is the selection logic's view of the network for unit tests: an
// address set and, per address, whether a probe succeeds and its time.
type fakeNet struct {
	mu     sync.Mutex
	addrs  []string
	ms     map[string]float64 // "ip:port" → total probe time; absent: fails
	probes map[string]int
}

func (f *fakeNet) lookup(context.Context, string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.addrs...), nil
}

func (f *fakeNet) probe(_ context.Context, addr string) Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probes[addr]++
	if v, ok := f.ms[addr]; ok {
		return Result{Addr: addr, OK: true, TLSHandshakeMS: v}
	}
	return Result{Addr: addr, Error: "tcp connect " + addr + ": connection refused"}
}

func (f *fakeNet) set(addr string, ms float64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ok {
		f.ms[addr] = ms
	} else {
		delete(f.ms, addr)
	}
}

const (
	edgeA = "192.0.2.1:636"
	edgeB = "192.0.2.2:636"
	edgeC = "192.0.2.3:636"
)

// newFakeDialer is a Dialer over fakeNet with the default numbers, a
// clock and a state file, already ranked on {A: a ms, B: b ms}.
func newFakeDialer(t *testing.T, a, b float64) (*Dialer, *fakeNet, *testbed.Clock) {
	t.Helper()
	f := &fakeNet{addrs: []string{"192.0.2.1", "192.0.2.2"}, ms: map[string]float64{edgeA: a, edgeB: b}, probes: map[string]int{}}
	clock := testbed.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := DefaultConfig()
	cfg.Name = "ldap.example.test"
	cfg.State = t.TempDir() + "/state.json"
	d := &Dialer{Config: cfg, Lookup: f.lookup, Probe: f.probe, Now: clock.Now}
	if r := d.Rank(context.Background()); r.NoChoice != "" {
		t.Fatalf("rank: %+v", r)
	}
	return d, f, clock
}

// failover is DialContext's failover from the chosen edge from, which
// failed, to to: the ranking in use keeps to and writes it down.
func failover(t *testing.T, d *Dialer, from, to string) {
	t.Helper()
	if !d.keep(to, map[string]bool{from: true, to: true}) || d.Current().Chosen != to {
		t.Fatalf("failover %s → %s not kept: %+v", from, to, d.Current())
	}
}

// TestWatcherStreak: after a failover from A to B, one successful probe
// of A does not switch back (an edge that just finished restarting); two
// in a row do; a failure in between starts the streak again.
func TestWatcherStreak(t *testing.T) {
	d, f, clock := newFakeDialer(t, 10, 100)
	if d.Current().Chosen != edgeA {
		t.Fatalf("chosen %q, want A", d.Current().Chosen)
	}
	failover(t, d, edgeA, edgeB)
	w := &Watcher{Dialer: d}
	round := func() (Event, bool) { clock.Advance(time.Minute); return w.Round(context.Background()) }

	f.set(edgeA, 10, true)
	if ev, ok := round(); ok {
		t.Fatalf("one success switched back: %+v", ev)
	}
	f.set(edgeA, 0, false)
	if ev, ok := round(); ok {
		t.Fatalf("a failure switched: %+v", ev)
	}
	f.set(edgeA, 10, true)
	if ev, ok := round(); ok {
		t.Fatalf("one success after a failure switched back: %+v", ev)
	}
	ev, ok := round()
	if !ok || ev.Reason != ReasonBetterEdge || ev.From != edgeB || ev.To != edgeA || ev.FromMS != 100 || ev.ToMS != 10 {
		t.Fatalf("two successes in a row: %+v %v, want better-edge B → A", ev, ok)
	}
	st, err := LoadState(d.Config.State)
	if err != nil || st.Chosen != edgeA || d.Current().Chosen != edgeA {
		t.Fatalf("after the switch the state holds %q (%v), the dialer %q; want A", st.Chosen, err, d.Current().Chosen)
	}
	// The ranking probed B once, and each of the 4 rounds probed it
	// beside A (the gain is measured on fresh probes of both); on A, the
	// best edge, a round probes nothing: nothing ranks above it.
	if _, ok := round(); ok {
		t.Fatal("a switch on the best edge")
	}
	if f.probes[edgeB] != 5 {
		t.Fatalf("B probed %d times, want 1 + 4 rounds", f.probes[edgeB])
	}
}

// TestWatcherGain: a re-measurement (older than stale) proposes a switch
// only for a gain of at least 20 ms and at least 25 %, both.
func TestWatcherGain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cur, next float64
		switches  bool
	}{
		{"100 to 79 ms: 25 % not met", 100, 79, false},
		{"4 to 3 ms: 20 ms not met", 4, 3, false},
		{"100 to 60 ms", 100, 60, true},
		{"100 to 75 ms: both met exactly", 100, 75, true},
		{"same data centre, 1.0 to 0.4 ms", 1.0, 0.4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, f, clock := newFakeDialer(t, 500, tc.cur) // B is best and chosen
			if d.Current().Chosen != edgeB {
				t.Fatalf("chosen %q, want B", d.Current().Chosen)
			}
			w := &Watcher{Dialer: d}
			f.set(edgeA, tc.next, true)
			clock.Advance(30 * time.Minute)
			if _, ok := w.Round(context.Background()); ok {
				t.Fatal("a switch before the measurement is stale")
			}
			clock.Advance(31 * time.Minute)
			ev, ok := w.Round(context.Background())
			if ok != tc.switches {
				t.Fatalf("re-measured %v → %v ms: switch %v (%+v), want %v", tc.cur, tc.next, ok, ev, tc.switches)
			}
			if ok && (ev.From != edgeB || ev.To != edgeA || ev.Reason != ReasonBetterEdge) {
				t.Fatalf("event %+v", ev)
			}
			if tc.switches {
				return
			}
			// A now ranks above B, and retrying it succeeds every round:
			// a streak alone must not undo the hysteresis.
			for range 4 {
				clock.Advance(5 * time.Minute)
				if ev, ok := w.Round(context.Background()); ok {
					t.Fatalf("the retry of a faster edge switched without the gain: %+v", ev)
				}
			}
			if f.probes[edgeA] < 5 {
				t.Fatalf("A probed %d times: the rounds did not retry it", f.probes[edgeA])
			}
		})
	}
}

// TestWatcherSetChange: an edge added invalidates the measurement even
// though the chosen address is still in the set, but a switch still needs
// the gain; the chosen edge removed from the set moves at once.
func TestWatcherSetChange(t *testing.T) {
	d, f, clock := newFakeDialer(t, 10, 100)
	w := &Watcher{Dialer: d}
	f.mu.Lock()
	f.addrs = append(f.addrs, "192.0.2.3")
	f.ms[edgeC] = 9.5
	f.mu.Unlock()
	clock.Advance(time.Minute)
	if ev, ok := w.Round(context.Background()); ok {
		t.Fatalf("switched for 0.5 ms: %+v", ev)
	}
	if cur := d.Current(); len(cur.Addresses) != 3 || cur.Ranking[0].Addr != edgeC || cur.Chosen != edgeA {
		t.Fatalf("after the set change: %+v, want C first, A still chosen", cur)
	}
	f.mu.Lock()
	f.addrs = []string{"192.0.2.2", "192.0.2.3"} // A rotated out
	f.mu.Unlock()
	clock.Advance(time.Minute)
	ev, ok := w.Round(context.Background())
	if !ok || ev.From != edgeA || ev.To != edgeC {
		t.Fatalf("the chosen edge left the set: %+v %v, want A → C", ev, ok)
	}
}

// TestWatcherNothingToChoose: with fewer than two addresses the watcher
// keeps the session and proposes nothing.
func TestWatcherNothingToChoose(t *testing.T) {
	d, f, clock := newFakeDialer(t, 10, 100)
	w := &Watcher{Dialer: d}
	f.mu.Lock()
	f.addrs = f.addrs[:1]
	f.mu.Unlock()
	for range 3 {
		clock.Advance(2 * time.Hour)
		if ev, ok := w.Round(context.Background()); ok {
			t.Fatalf("switch with one address: %+v", ev)
		}
	}
}

// TestFullJitter: every wait is in [0, interval] and the range is used.
func TestFullJitter(t *testing.T) {
	const interval = 5 * time.Minute
	lo, hi := interval, time.Duration(0)
	for range 10000 {
		j := FullJitter(interval)
		if j < 0 || j > interval {
			t.Fatalf("jitter %v outside [0, %v]", j, interval)
		}
		lo, hi = min(lo, j), max(hi, j)
	}
	if lo > interval/10 || hi < interval*9/10 {
		t.Fatalf("10000 jitters span only [%v, %v] of [0, %v]", lo, hi, interval)
	}
}

// TestWatcherRunJitter: in a synctest bubble, Run waits a full-jitter
// time in [0, interval] before every round, then keeps going.
func TestWatcherRunJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var rounds []time.Time
		f := &fakeNet{addrs: []string{"192.0.2.1", "192.0.2.2"}, ms: map[string]float64{edgeA: 1, edgeB: 2}, probes: map[string]int{}}
		cfg := DefaultConfig()
		cfg.Name = "ldap.example.test"
		d := &Dialer{Config: cfg, Probe: f.probe, Lookup: func(ctx context.Context, n string) ([]string, error) {
			mu.Lock()
			rounds = append(rounds, time.Now())
			mu.Unlock()
			return f.lookup(ctx, n)
		}}
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		d.Rank(ctx) // the agent's first dial; Lookup records it at start
		done := make(chan error)
		go func() { done <- (&Watcher{Dialer: d}).Run(ctx, make(chan Event)) }()
		time.Sleep(100 * cfg.Interval)
		cancel()
		if err := <-done; err != context.Canceled {
			t.Fatalf("Run returned %v", err)
		}
		if len(rounds) < 100 {
			t.Fatalf("%d rounds in 100 intervals: full jitter averages half an interval", len(rounds))
		}
		prev := start
		for _, r := range rounds {
			if gap := r.Sub(prev); gap < 0 || gap > cfg.Interval {
				t.Fatalf("a round %v after the previous one, outside [0, %v]", gap, cfg.Interval)
			}
			prev = r
		}
	})
}

// TestWatcherUnwritableState: a switch that cannot be written down is not
// made (no choice, as for the dialer): no event, the session stays.
func TestWatcherUnwritableState(t *testing.T) {
	d, f, clock := newFakeDialer(t, 10, 100)
	failover(t, d, edgeA, edgeB)
	w := &Watcher{Dialer: d}
	f.set(edgeA, 10, true)
	clock.Advance(time.Minute)
	w.Round(context.Background())
	d.Config.State = t.TempDir() + "/missing-dir/state.json"
	clock.Advance(time.Minute)
	if ev, ok := w.Round(context.Background()); ok {
		t.Fatalf("a switch the state file cannot record: %+v", ev)
	}
	if d.Current().Chosen != edgeB {
		t.Fatalf("chosen %q, want B still", d.Current().Chosen)
	}
	clock.Advance(2 * time.Hour) // the re-measurement cannot be written either
	if ev, ok := w.Round(context.Background()); ok || d.Current().Chosen != "" || d.Current().NoChoice == "" {
		t.Fatalf("stale re-measure with an unwritable state: %+v %v, current %+v", ev, ok, d.Current())
	}
}

// TestWatcherFlappingSet: an address set that changes every round (an
// edge flapping in and out of DNS) re-measures every round, but a move
// away from the current edge, still in the set and answering, needs the
// streak as any switch does: two edges that take turns being fast cause
// no switch in 10 rounds, flapping or not (before, every set change
// switched on the one measurement), and in a flapping set an edge that
// is steadily faster wins after Streak rounds, not on the first.
func TestWatcherFlappingSet(t *testing.T) {
	const edgeX = "192.0.2.9" // refuses: it only changes the set
	for _, flap := range []bool{false, true} {
		d, f, clock := newFakeDialer(t, 10, 100)
		w := &Watcher{Dialer: d}
		round := func(i int, aFast bool) (Event, bool) {
			f.mu.Lock()
			f.addrs = []string{"192.0.2.1", "192.0.2.2"}
			if flap && i%2 == 1 {
				f.addrs = append(f.addrs, edgeX)
			}
			f.ms[edgeA], f.ms[edgeB] = 100, 10
			if aFast {
				f.ms[edgeA], f.ms[edgeB] = 10, 100
			}
			f.mu.Unlock()
			clock.Advance(time.Minute)
			return w.Round(context.Background())
		}
		switches := 0
		for i := 1; i <= 10; i++ {
			if _, ok := round(i, i%2 == 0); ok {
				switches++
			}
		}
		if switches != 0 {
			t.Errorf("flap=%v: %d switches in 10 rounds of edges taking turns, want 0", flap, switches)
		}
		if !flap {
			continue // a stable set retries only edges ranked above the current one until stale
		}
		// The other edge steadily faster from now on.
		chosen := d.Current().Chosen
		ev, ok := round(11, chosen == edgeB)
		if ok {
			t.Fatalf("flap=%v: switched on the first round of a faster edge: %+v", flap, ev)
		}
		ev, ok = round(12, chosen == edgeB)
		if !ok || ev.From != chosen || ev.To == chosen {
			t.Fatalf("flap=%v: no switch after %d rounds of a faster edge: %+v %v", flap, d.Config.Streak, ev, ok)
		}
	}
}

// TestFailoverKeptOnlyIfRanked: DialContext keeps a connection only if
// the ranking in use at that moment ranks its edge next. A watcher round
// replaced the ranking while B, the failover target, was being dialed,
// with one of the set {A, C}: B is not kept and not written down (a
// chosen edge outside the ranking is a state file LoadState rejects),
// C is; and in a ranking A, B, C an edge is not kept while one ranked
// before it is still untried.
func TestFailoverKeptOnlyIfRanked(t *testing.T) {
	d, f, clock := newFakeDialer(t, 10, 100)
	f.mu.Lock()
	f.addrs, f.ms[edgeC] = []string{"192.0.2.1", "192.0.2.3"}, 50
	f.mu.Unlock()
	clock.Advance(time.Minute)
	(&Watcher{Dialer: d}).Round(context.Background()) // re-measures {A, C}, keeps A
	if cur := d.Current(); cur.Chosen != edgeA || len(cur.Ranking) != 2 {
		t.Fatalf("after the round: %+v, want {A, C}, A chosen", cur)
	}
	if d.keep(edgeB, map[string]bool{edgeA: true, edgeB: true}) {
		t.Fatal("kept B, which left the ranking in use")
	}
	st, err := LoadState(d.Config.State)
	if err != nil || st.Chosen != edgeA {
		t.Fatalf("state after B was refused: %+v %v, want readable, A chosen", st, err)
	}
	if d.keep(edgeB, map[string]bool{edgeA: true, edgeB: true, edgeC: true}) {
		t.Fatal("kept B, which left the ranking in use, once every edge of it was tried")
	}
	if !d.keep(edgeC, map[string]bool{edgeA: true, edgeB: true, edgeC: true}) {
		t.Fatal("C, next in the ranking in use, not kept")
	}
	if st, err := LoadState(d.Config.State); err != nil || st.Chosen != edgeC || d.Current().Chosen != edgeC {
		t.Fatalf("state after the failover to C: %+v %v, want C chosen", st, err)
	}

	d, f, _ = newFakeDialer(t, 10, 20)
	f.mu.Lock()
	f.addrs, f.ms[edgeC] = []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}, 30
	f.mu.Unlock()
	d.Rank(context.Background()) // A, B, C
	if d.keep(edgeC, map[string]bool{edgeA: true, edgeC: true}) {
		t.Fatal("kept C while B, ranked before it, was never tried")
	}
}

// TestWatcherChosenLeavesTwoSet: in a set of two, the chosen edge leaves
// (one address is left: nothing to choose). The round moves the agent at
// once, cleanly, with edge-left to the name, instead of keeping it on an
// edge whose drain will cut the session as an error; the ranking in use
// has no choice, so the reconnect dials the name.
func TestWatcherChosenLeavesTwoSet(t *testing.T) {
	d, f, clock := newFakeDialer(t, 10, 100)
	w := &Watcher{Dialer: d}
	f.mu.Lock()
	f.addrs = []string{"192.0.2.2"} // A rotated out
	f.mu.Unlock()
	clock.Advance(time.Minute)
	ev, ok := w.Round(context.Background())
	if !ok || ev.Reason != ReasonEdgeLeft || ev.From != edgeA || ev.To != "" {
		t.Fatalf("the chosen edge left a set of two: %+v %v, want edge-left A → the name", ev, ok)
	}
	if cur := d.Current(); cur.Chosen != "" || cur.NoChoice == "" {
		t.Fatalf("ranking in use %+v, want no choice", cur)
	}
	clock.Advance(time.Minute)
	if ev, ok := w.Round(context.Background()); ok {
		t.Fatalf("a second event with one address: %+v", ev)
	}

	// The other edge left instead: the agent's edge is the one left, it
	// stays.
	d, f, clock = newFakeDialer(t, 10, 100)
	f.mu.Lock()
	f.addrs = []string{"192.0.2.1"}
	f.mu.Unlock()
	clock.Advance(time.Minute)
	if ev, ok := (&Watcher{Dialer: d}).Round(context.Background()); ok {
		t.Fatalf("an event though the agent's edge is the one left: %+v", ev)
	}
}

// TestWatcherSwitchBackFresh: after a failover to B, B's ranking figure
// (100 ms) is old; B now answers in 12 ms, A in 10. A switch back
// compares fresh probes of both sides, so two good rounds of A make no
// move (2 ms is no gain); compared with B's old figure they made one
// needless reconnect. When B really is slow, the move happens.
func TestWatcherSwitchBackFresh(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bNow  float64
		moves bool
	}{
		{"current edge fast again", 12, false},
		{"current edge still slow", 100, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, f, clock := newFakeDialer(t, 10, 100)
			failover(t, d, edgeA, edgeB)
			f.set(edgeB, tc.bNow, true)
			w := &Watcher{Dialer: d}
			var ev Event
			var ok bool
			for range 4 {
				clock.Advance(time.Minute)
				if ev, ok = w.Round(context.Background()); ok {
					break
				}
			}
			if ok != tc.moves {
				t.Fatalf("B now %v ms, A 10 ms: switch %v (%+v), want %v", tc.bNow, ok, ev, tc.moves)
			}
			if ok && (ev.From != edgeB || ev.To != edgeA || ev.FromMS != tc.bNow) {
				t.Fatalf("event %+v, want B (fresh %v ms) → A", ev, tc.bNow)
			}
		})
	}
}

// TestWatcherFailedCurrentNotChosen: the stale re-measure finds the
// current edge failing while its session lives. The session is kept (no
// event), but the choice moves to the best edge that answered, in memory
// and in the state file, so a reconnect or a restart does not try the
// failing edge first (a budget lost on every restart).
func TestWatcherFailedCurrentNotChosen(t *testing.T) {
	d, f, clock := newFakeDialer(t, 10, 100)
	f.set(edgeA, 0, false)
	clock.Advance(2 * time.Hour)
	if ev, ok := (&Watcher{Dialer: d}).Round(context.Background()); ok {
		t.Fatalf("an event for a failed re-measure: %+v", ev)
	}
	if cur := d.Current(); cur.Chosen != edgeB || cur.Ranking[0].Addr != edgeB {
		t.Fatalf("ranking in use %+v, want B first and chosen", cur)
	}
	st, err := LoadState(d.Config.State)
	if err != nil || st.Chosen != edgeB {
		t.Fatalf("state %+v %v, want B chosen", st, err)
	}
	restarted := &Dialer{Config: d.Config, Lookup: f.lookup, Probe: f.probe, Now: clock.Now}
	before := f.probes[edgeA]
	if r := restarted.Select(context.Background()); r.Chosen != edgeB || f.probes[edgeA] != before {
		t.Fatalf("a restart selected %+v, probing A %d more times; want the state's B, no probe", r, f.probes[edgeA]-before)
	}
}

// TestRetryAboveBoundsParallel: the watcher's retry of the addresses
// ranked above the current one, here all of a set larger than
// MaxParallel, holds at most MaxParallel probes (sockets) at once. In a
// synctest bubble every probe sleeps until all others are blocked, so
// the peak is exactly the bound.
func TestRetryAboveBoundsParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 3*MaxParallel + 7
		f := &fakeNet{ms: map[string]float64{}, probes: map[string]int{}}
		for i := range n {
			ip := "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
			f.addrs = append(f.addrs, ip)
			f.ms[ip+":636"] = float64(i + 1) // the address order is the ranking order
		}
		slices.SortFunc(f.addrs, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
		var inFlight, peak atomic.Int64
		probe := func(ctx context.Context, addr string) Result {
			cur := inFlight.Add(1)
			for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
			}
			time.Sleep(time.Millisecond)
			inFlight.Add(-1)
			return f.probe(ctx, addr)
		}
		cfg := DefaultConfig()
		cfg.Name = "ldap.example.test"
		d := &Dialer{Config: cfg, Lookup: f.lookup, Probe: probe}
		r := d.Rank(context.Background())
		last := r.Ranking[n-1].Addr
		tried := map[string]bool{}
		for _, e := range r.Ranking {
			tried[e.Addr] = true
		}
		if !d.keep(last, tried) { // a failover to the last edge: every other one ranks above it
			t.Fatal("failover to the last edge not kept")
		}
		peak.Store(0)
		(&Watcher{Dialer: d}).Round(context.Background())
		if got := peak.Load(); got != MaxParallel {
			t.Fatalf("%d probes in flight at once retrying %d addresses, want MaxParallel (%d)", got, n-1, MaxParallel)
		}
	})
}

// TestWatcherZeroInterval: a Watcher on a Dialer built without
// NewDialer, its interval left 0, waits the default interval (full
// jitter, 5 min at most) between rounds, not none: in one hour of the
// bubble's clock it runs about 24 rounds, not thousands.
func TestWatcherZeroInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		f := &fakeNet{addrs: []string{"192.0.2.1", "192.0.2.2"}, ms: map[string]float64{edgeA: 1, edgeB: 2}, probes: map[string]int{}}
		var lookups atomic.Int64
		d := &Dialer{Config: Config{Name: "ldap.example.test"}, Probe: f.probe, Lookup: func(ctx context.Context, n string) ([]string, error) {
			if lookups.Add(1) > 1000 {
				cancel() // a busy loop: stop it, the test fails below
			}
			return f.lookup(ctx, n)
		}}
		d.Rank(ctx)
		done := make(chan error, 1)
		go func() { done <- (&Watcher{Dialer: d}).Run(ctx, make(chan Event)) }()
		time.Sleep(time.Hour)
		cancel()
		<-done
		if n := lookups.Load(); n > 100 || n < 2 {
			t.Fatalf("%d lookups in one hour with interval 0: want the default 5 min interval's dozen or two", n)
		}
		if d.Config.Interval != 5*time.Minute || d.Config.Budget != DefaultBudget || d.Config.Stale != time.Hour {
			t.Fatalf("config after the first call: %+v, want the defaults", d.Config)
		}
	})
}

// TestWatcherRoundReplaced: a failover (A to B) happens while a watcher
// round re-measures a changed set. The round, decided on the ranking it
// started from, changes nothing: the failover stays the choice, in memory
// and in the state file, and the next round starts from it.
func TestWatcherRoundReplaced(t *testing.T) {
	d, f, clock := newFakeDialer(t, 10, 100)
	f.mu.Lock()
	f.addrs, f.ms[edgeC] = []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}, 50
	f.mu.Unlock()
	var once sync.Once
	d.Probe = func(ctx context.Context, addr string) Result {
		if addr == edgeC {
			once.Do(func() { failover(t, d, edgeA, edgeB) })
		}
		return f.probe(ctx, addr)
	}
	clock.Advance(time.Minute)
	w := &Watcher{Dialer: d}
	if ev, ok := w.Round(context.Background()); ok {
		t.Fatalf("a round replaced under it proposed %+v", ev)
	}
	st, err := LoadState(d.Config.State)
	if cur := d.Current(); cur.Chosen != edgeB || len(cur.Addresses) != 2 || err != nil || st.Chosen != edgeB {
		t.Fatalf("in use %+v, state %+v (%v): want the failover to B kept", cur, st, err)
	}
	clock.Advance(time.Minute) // the next round measures the new set
	w.Round(context.Background())
	if cur := d.Current(); len(cur.Addresses) != 3 {
		t.Fatalf("the next round did not measure the new set: %+v", cur)
	}
}

// TestWatcherRoundCancelled: the agent shuts down (the watcher's context
// ends) while a stale re-measure is probing. The probes cut short fail
// with the context's error, which says nothing about the edges: the
// round changes nothing, in memory or in the state file, instead of
// writing a fresh ranking of failures that would leave a restarted agent
// no edge to fail over to for an hour.
func TestWatcherRoundCancelled(t *testing.T) {
	d, f, clock := newFakeDialer(t, 10, 100)
	before, err := LoadState(d.Config.State)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.Probe = func(pctx context.Context, addr string) Result {
		cancel() // the agent stops while this round probes
		if pctx.Err() != nil {
			return Result{Addr: addr, Error: "tls handshake " + addr + ": " + pctx.Err().Error()}
		}
		return f.probe(pctx, addr)
	}
	clock.Advance(2 * time.Hour)
	if ev, ok := (&Watcher{Dialer: d}).Round(ctx); ok {
		t.Fatalf("an event from a cancelled round: %+v", ev)
	}
	after, err := LoadState(d.Config.State)
	if err != nil || !after.MeasuredAt.Equal(before.MeasuredAt) || !after.Ranking[1].OK {
		t.Fatalf("state after a cancelled re-measure: %+v %v, want the one before, %+v", after, err, before)
	}
	if cur := d.Current(); !cur.MeasuredAt.Equal(before.MeasuredAt) || cur.Chosen != edgeA {
		t.Fatalf("ranking in use after a cancelled re-measure: %+v", cur)
	}
}
