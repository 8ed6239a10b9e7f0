package probe

import (
	"context"
	"sync"
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

// TestWatcherStreak: after a failover from A to B, one successful probe
// of A does not switch back (an edge that just finished restarting); two
// in a row do; a failure in between starts the streak again.
func TestWatcherStreak(t *testing.T) {
	d, f, clock := newFakeDialer(t, 10, 100)
	if d.Current().Chosen != edgeA {
		t.Fatalf("chosen %q, want A", d.Current().Chosen)
	}
	d.choose(edgeB, true) // the failover
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
	if _, ok := round(); ok {
		t.Fatal("a switch on the best edge")
	}
	if f.probes[edgeB] != 1 { // only the ranking probed B: nothing above A to retry
		t.Fatalf("B probed %d times", f.probes[edgeB])
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
	d.choose(edgeB, true)
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
