package probe

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// ReasonBetterEdge is the reason of a switch the watcher proposes: a
// planned, clean reconnect, not an error.
const ReasonBetterEdge = "better-edge"

// Event tells the agent to reconnect. It is not an error: an agent must
// not let it feed its reconnect backoff, or moving to its preferred edge
// would be punished with a growing delay for doing the right thing.
type Event struct {
	Reason string    `json:"reason"`
	From   string    `json:"from"` // "" when the agent had no choice (dialed the name)
	To     string    `json:"to"`
	FromMS float64   `json:"from_ms"` // the current edge's probe time (0 when unknown or failed)
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

// FullJitter is a uniformly random duration in [0, d].
func FullJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// Run waits a jittered interval, runs a Round, sends its event if any,
// and repeats until ctx ends (its error is returned).
func (w *Watcher) Run(ctx context.Context, events chan<- Event) error {
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
// the Dialer's choice (and saved), for the agent to reconnect.
func (w *Watcher) Round(ctx context.Context) (Event, bool) {
	d := w.Dialer
	cur := d.Current()
	if cur.Name == "" {
		return Event{}, false // the agent has not dialed yet: no session to watch
	}
	addrs, _, ok := d.resolve(ctx)
	if !ok {
		return Event{}, false // nothing to choose from now: keep the session
	}
	if !cur.sameSet(d.Config.Name, d.Config.Port, addrs) || !d.fresh(cur) {
		return w.remeasure(ctx, cur, addrs)
	}
	return w.retryAbove(ctx, cur)
}

// remeasure measures the whole set and moves only for a real gain, or
// when the current edge left the set.
func (w *Watcher) remeasure(ctx context.Context, cur Ranking, addrs []string) (Event, bool) {
	d := w.Dialer
	w.resetStreaks()
	next := Ranking{Name: d.Config.Name, Addresses: addrs, MeasuredAt: d.now(),
		Ranking: Measure(ctx, addrs, d.Config.Port, d.probe)}
	best := next.Ranking[0]
	again, _, inSet := next.Entry(cur.Chosen)
	switch {
	case !best.OK:
		// Nobody answered now: keep the live session and the choice.
		next.Chosen = cur.Chosen
		if !inSet {
			next.Chosen = ""
		}
	case cur.Chosen == "" || !inSet:
		next.Chosen = best.Addr // no choice before, or the edge is being removed
	case best.Addr != cur.Chosen && again.OK && d.Config.worthSwitching(again.Total(), best.Total()):
		next.Chosen = best.Addr
	default:
		// No real gain; or the current edge failed the probe while the
		// session lives: it now ranks last, and retryAbove moves away
		// after a streak, as for any switch back.
		next.Chosen = cur.Chosen
	}
	d.log().Info("re-measured", "target", d.Config.Name, "edge", next.Chosen, "result", okCount(next.Ranking))
	if err := d.commit(next); err != nil {
		// Unwritable: no choice, as for the dialer. The live session
		// stays where it is; a reconnect dials the name.
		d.log().Warn("cannot write the state file: no choice", "err", err)
		next.Chosen, next.NoChoice = "", err.Error()
		d.use(next)
		return Event{}, false
	}
	if next.Chosen == cur.Chosen || next.Chosen == "" {
		return Event{}, false
	}
	return w.event(cur.Chosen, again, best), true
}

// retryAbove probes the addresses ranked above the current one; the best
// of them with a full streak and a real gain becomes the choice.
func (w *Watcher) retryAbove(ctx context.Context, cur Ranking) (Event, bool) {
	d := w.Dialer
	curEntry, idx, ok := cur.Entry(cur.Chosen)
	if !ok || idx == 0 {
		return Event{}, false
	}
	above := cur.Ranking[:idx]
	results := make([]Result, len(above))
	var wg sync.WaitGroup
	for i, e := range above {
		wg.Go(func() { results[i] = d.probe(ctx, e.Addr) })
	}
	wg.Wait()

	w.mu.Lock()
	if w.streak == nil {
		w.streak = map[string]int{}
	}
	for _, r := range results {
		if r.OK {
			w.streak[r.Addr]++
		} else {
			w.streak[r.Addr] = 0
		}
	}
	var pick Result
	for _, r := range results { // ranking order: the first eligible is the best
		if r.OK && w.streak[r.Addr] >= d.Config.Streak && (!curEntry.OK || d.Config.worthSwitching(curEntry.Total(), r.Total())) {
			pick = r
			break
		}
	}
	w.mu.Unlock()
	if pick.Addr == "" {
		return Event{}, false
	}
	if err := d.choose(pick.Addr, false); err != nil {
		d.log().Warn("cannot write the state file: staying", "edge", cur.Chosen, "err", err)
		return Event{}, false
	}
	w.resetStreaks()
	return w.event(cur.Chosen, curEntry, pick), true
}

func (w *Watcher) resetStreaks() {
	w.mu.Lock()
	w.streak = nil
	w.mu.Unlock()
}

func (w *Watcher) event(from string, fromR, to Result) Event {
	ev := Event{Reason: ReasonBetterEdge, From: from, To: to.Addr, ToMS: ms(to.Total()), At: w.Dialer.now()}
	if fromR.OK {
		ev.FromMS = ms(fromR.Total())
	}
	w.Dialer.log().Info("better edge", "edge", to.Addr, "target", from, "result", ReasonBetterEdge)
	return ev
}
