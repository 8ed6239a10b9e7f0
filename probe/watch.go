package probe

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// The reasons of the events the watcher sends: planned, clean reconnects,
// not errors.
const (
	// ReasonBetterEdge: an edge gains enough over the current one.
	ReasonBetterEdge = "better-edge"
	// ReasonEdgeLeft: the current edge left the name's address set (it is
	// being rotated out and will be drained); To is the best edge left,
	// or "" when one address is left: nothing to choose, dial the name.
	ReasonEdgeLeft = "edge-left"
)

// Event tells the agent to reconnect. It is not an error: an agent must
// not let it feed its reconnect backoff, or moving to its preferred edge
// would be punished with a growing delay for doing the right thing.
type Event struct {
	Reason string    `json:"reason"`
	From   string    `json:"from"`    // "" when the agent had no choice (dialed the name)
	To     string    `json:"to"`      // "" when the agent now has no choice: dial the name
	FromMS float64   `json:"from_ms"` // the current edge's probe time, fresh (0 when it failed or was not probed)
	ToMS   float64   `json:"to_ms"`
	At     time.Time `json:"at"`
}

// Watcher runs beside a live session and does two things: every round it
// retries the addresses ranked above the current one with the full probe
// (switching back needs Streak successes in a row), and when the
// measurement is older than Stale, or the address set changed, it
// measures the whole set again. Every switch needs the gain of
// Config.worthSwitching.
type Watcher struct {
	Dialer *Dialer
	// Jitter returns the wait before a round given Interval; nil is full
	// jitter, uniform in [0, Interval], so a fleet's probes never
	// synchronise.
	Jitter func(interval time.Duration) time.Duration

	mu     sync.Mutex
	streak map[string]int // consecutive successes of addresses above the current one
}

// NewWatcher returns a Watcher beside the Dialer d (from NewDialer): it
// checks d's Config, whose interval, stale, streak and gain thresholds it
// runs by, giving zero fields their defaults as NewDialer does.
func NewWatcher(d *Dialer) (*Watcher, error) {
	if d == nil {
		return nil, errors.New("probe: a watcher needs a dialer")
	}
	if err := d.ready(); err != nil {
		return nil, err
	}
	return &Watcher{Dialer: d}, nil
}

// FullJitter is a uniformly random duration in [0, d].
func FullJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// Run waits a jittered interval, runs a Round, sends its event if any,
// and repeats until ctx ends (its error is returned). A bad Config is
// returned at once.
func (w *Watcher) Run(ctx context.Context, events chan<- Event) error {
	if err := w.Dialer.ready(); err != nil {
		return err
	}
	jitter := w.Jitter
	if jitter == nil {
		jitter = FullJitter
	}
	for {
		t := time.NewTimer(jitter(w.Dialer.Config.Interval))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if ev, ok := w.Round(ctx); ok {
			select {
			case events <- ev:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// Round is one round of the watcher; it reports a switch, already made
// the Dialer's choice (and saved), for the agent to reconnect. A round
// whose ranking in use was replaced while it probed (by a dial, a
// failover) changes nothing: the next round starts from the new one; nor
// does one whose ctx ended while it probed.
func (w *Watcher) Round(ctx context.Context) (Event, bool) {
	d := w.Dialer
	if d.ready() != nil {
		return Event{}, false
	}
	cur, gen := d.current()
	if cur.Name == "" {
		return Event{}, false // the agent has not dialed yet: no session to watch
	}
	addrs, _, none, ok, err := d.resolve(ctx)
	if !ok {
		if err == nil && len(addrs) == 1 && cur.Chosen != "" && !onAddrs(cur.Chosen, addrs) {
			return w.leftToName(cur, gen, none)
		}
		return Event{}, false // nothing to choose from now: keep the session
	}
	if changed := !cur.sameSet(d.Config.Name, d.Config.Port, addrs); changed || !d.fresh(cur) {
		return w.remeasure(ctx, cur, gen, addrs, changed)
	}
	return w.retryAbove(ctx, cur, gen)
}

// leftToName: the current edge left a set that now has one address.
// There is nothing to choose, so the agent dials the name (which
// resolves to the one left), but it moves now, cleanly, rather than when
// the drain cuts its session as an error.
func (w *Watcher) leftToName(cur Ranking, gen uint64, none Ranking) (Event, bool) {
	d := w.Dialer
	if !d.useIf(gen, none) {
		return Event{}, false
	}
	w.resetStreaks()
	return w.event(ReasonEdgeLeft, cur.Chosen, Result{}, Result{}), true
}

// remeasure measures the whole set and moves only for a real gain, or
// at once when the current edge left the set. After a change of the set
// (changed) a move away from a current edge still in it also needs the
// streak, as in retryAbove: the measurement counts as one round of the
// addresses it ranks above the current one, so a set that changes every
// round (an edge flapping in and out of DNS) cannot make the choice
// follow every measurement's noise.
func (w *Watcher) remeasure(ctx context.Context, cur Ranking, gen uint64, addrs []string, changed bool) (Event, bool) {
	d := w.Dialer
	if !changed {
		w.resetStreaks()
	}
	next := Ranking{Name: d.Config.Name, Addresses: addrs, MeasuredAt: d.now(),
		Ranking: Measure(ctx, addrs, d.Config.Port, d.probe)}
	if ctx.Err() != nil {
		// The agent is stopping: the probes cut short failed for that,
		// not for the edges. Written down, they would leave a restart
		// no edge to fail over to until the next re-measure.
		return Event{}, false
	}
	best := next.Ranking[0]
	again, idx, inSet := next.Entry(cur.Chosen)
	reason, to, quiet := ReasonBetterEdge, best, false
	switch {
	case !best.OK:
		// Nobody answered now: keep the live session and the choice.
		next.Chosen = cur.Chosen
		if !inSet {
			next.Chosen = ""
		}
	case cur.Chosen == "":
		next.Chosen = best.Addr // no choice before: the agent dialed the name
		w.resetStreaks()
	case !inSet:
		next.Chosen, reason = best.Addr, ReasonEdgeLeft // the edge is being rotated out
		w.resetStreaks()
	case !again.OK:
		// The current edge failed the probe while the session lives:
		// the session stays, but the choice, what a reconnect or a
		// restart dials first, is the best edge now, not one that fails.
		next.Chosen, quiet = best.Addr, true
		w.resetStreaks()
		d.log().Info("current edge failed the re-measure: new connections go to the best edge", "edge", best.Addr, "target", cur.Chosen, "err", again.Error)
	case changed:
		next.Chosen = cur.Chosen
		if pick, ok := w.streakPick(next.Ranking[:idx], again, true); ok {
			next.Chosen, to = pick.Addr, pick
			w.resetStreaks()
		}
	case best.Addr != cur.Chosen && d.Config.worthSwitching(again.Total(), best.Total()):
		next.Chosen = best.Addr
	default:
		next.Chosen = cur.Chosen // no real gain
	}
	d.log().Info("re-measured", "target", d.Config.Name, "edge", next.Chosen, "result", okCount(next.Ranking))
	if err := d.commitIf(gen, next); err != nil {
		if errors.Is(err, errReplaced) {
			d.log().Info("ranking replaced during the re-measure: no change", "target", d.Config.Name)
			return Event{}, false
		}
		// Unwritable: no choice, as for the dialer. The live session
		// stays where it is; a reconnect dials the name.
		d.log().Warn("cannot write the state file: no choice", "err", err)
		next.Chosen, next.NoChoice = "", err.Error()
		d.useIf(gen, next)
		return Event{}, false
	}
	if next.Chosen == cur.Chosen || next.Chosen == "" || quiet {
		return Event{}, false
	}
	return w.event(reason, cur.Chosen, again, to), true
}

// retryAbove probes the addresses ranked above the current one, and the
// current one beside them, at most MaxParallel at a time; the best of
// them with a full streak and a real gain over the current edge's fresh
// probe (not its figure of the last measurement, which may be an hour
// old) becomes the choice.
func (w *Watcher) retryAbove(ctx context.Context, cur Ranking, gen uint64) (Event, bool) {
	d := w.Dialer
	_, idx, ok := cur.Entry(cur.Chosen)
	if !ok || idx == 0 {
		return Event{}, false
	}
	results := make([]Result, idx+1) // above, then the current edge
	parallel(idx+1, func(i int) { results[i] = d.probe(ctx, cur.Ranking[i].Addr) })
	if ctx.Err() != nil {
		return Event{}, false // stopping: the failures say nothing of the edges' streaks
	}
	now := results[idx]

	pick, ok := w.streakPick(results[:idx], now, false)
	if !ok {
		return Event{}, false
	}
	if err := d.chooseIf(gen, pick.Addr); err != nil {
		d.log().Warn("no switch", "edge", cur.Chosen, "target", pick.Addr, "err", err)
		return Event{}, false
	}
	w.resetStreaks()
	return w.event(ReasonBetterEdge, cur.Chosen, now, pick), true
}

// streakPick counts one round of results, the addresses ranked above
// the current one (cur) in ranking order, and returns the best of them
// with a full streak and a real gain over cur (any gain when cur fails).
// With only, the streaks of addresses not in results start again: they
// are no longer above the current one.
func (w *Watcher) streakPick(results []Result, cur Result, only bool) (Result, bool) {
	d := w.Dialer
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.streak == nil || only {
		old := w.streak
		w.streak = map[string]int{}
		for _, r := range results {
			w.streak[r.Addr] = old[r.Addr]
		}
	}
	for _, r := range results {
		if r.OK {
			w.streak[r.Addr]++
		} else {
			w.streak[r.Addr] = 0
		}
	}
	for _, r := range results { // ranking order: the first eligible is the best
		if r.OK && w.streak[r.Addr] >= d.Config.Streak && (!cur.OK || d.Config.worthSwitching(cur.Total(), r.Total())) {
			return r, true
		}
	}
	return Result{}, false
}

func (w *Watcher) resetStreaks() {
	w.mu.Lock()
	w.streak = nil
	w.mu.Unlock()
}

// event is the switch from (whose fresh probe is fromR) to to.
func (w *Watcher) event(reason, from string, fromR, to Result) Event {
	ev := Event{Reason: reason, From: from, To: to.Addr, ToMS: ms(to.Total()), At: w.Dialer.now()}
	if fromR.OK {
		ev.FromMS = ms(fromR.Total())
	}
	w.Dialer.log().Info("moving the agent", "edge", to.Addr, "target", from, "result", reason)
	return ev
}
