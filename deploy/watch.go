package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
)

// Watch is the watch: section of fleet.yaml, how `fleet watch` keeps the
// published fleet healthy (docs/watch.md).
type Watch struct {
	// Interval is the longest pause between two rounds of checks; each
	// pause is drawn uniformly from [0, interval] (full jitter, Pause).
	Interval time.Duration `mapstructure:"interval"`
	// Fall failed checks in a row withdraw a published edge.
	Fall int `mapstructure:"fall"`
	// Rise passed checks in a row restore a withdrawn one.
	Rise int `mapstructure:"rise"`
	// MinEdges is the fewest edges a withdrawal may leave published (all
	// of them when the inventory lists fewer).
	MinEdges int     `mapstructure:"min_edges"`
	Replace  Replace `mapstructure:"replace"`
}

// Replace is the provisioning hook run for a withdrawn edge.
type Replace struct {
	Command string        `mapstructure:"command"`
	Timeout time.Duration `mapstructure:"timeout"`
}

// DefaultWatch is the watch section's defaults: 30 s, fall 3, rise 2,
// min_edges 2, a hook timeout of 10 min.
func DefaultWatch() Watch {
	return Watch{Interval: 30 * time.Second, Fall: 3, Rise: 2, MinEdges: 2, Replace: Replace{Timeout: 10 * time.Minute}}
}

// Validate reports every bad key of the watch section.
func (w Watch) Validate() error {
	var errs []string
	if w.Interval <= 0 {
		errs = append(errs, fmt.Sprintf("watch.interval: %v is not a positive duration", w.Interval))
	}
	if w.Fall < 1 {
		errs = append(errs, fmt.Sprintf("watch.fall: %d, want 1 or more", w.Fall))
	}
	if w.Rise < 1 {
		errs = append(errs, fmt.Sprintf("watch.rise: %d, want 1 or more", w.Rise))
	}
	if w.MinEdges < 1 {
		errs = append(errs, fmt.Sprintf("watch.min_edges: %d, want 1 or more", w.MinEdges))
	}
	if w.Replace.Timeout <= 0 {
		errs = append(errs, fmt.Sprintf("watch.replace.timeout: %v is not a positive duration", w.Replace.Timeout))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// PauseFloor is the shortest pause between two rounds (or the interval,
// when that is shorter): a draw near 0 must not run two rounds back to
// back.
const PauseFloor = time.Second

// Pause is the wait before the next round: full jitter, uniform in
// [0, interval], raised to min(PauseFloor, interval), so the rounds of
// several watches never fall in step. Its mean is interval/2 +
// floor²/(2·interval) (15.02 s at 30 s). r is a uniform float in [0, 1)
// (nil: the process's random source).
func (w Watch) Pause(r func() float64) time.Duration {
	if r == nil {
		r = rand.Float64
	}
	floor := min(PauseFloor, w.Interval)
	return max(time.Duration(r()*float64(w.Interval+1)), floor)
}

// Withdrawal is an inventory edge `fleet watch` took out of DNS: it
// stays in fleet.yaml, and every convergence leaves it unpublished until
// the watch restores it. The addresses are the ones withdrawn: an edge
// re-addressed in fleet.yaml (a rotation) is no longer the one withdrawn.
//
// It goes through three phases (Phase), each kept here so that a watch
// killed at any point resumes it: leaving (out of DNS, or leaving it, and
// still let in by the firewall until resolvers can no longer hold its
// records and it drained), out (the firewall dropped it at FirewalledOut)
// and rechecking (let in again at NextCheck, for the checks that restore
// it or drop it again).
type Withdrawal struct {
	IPv4   string    `json:"ipv4,omitempty"`
	IPv6   string    `json:"ipv6,omitempty"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason"`
	// LeftDNS is when its last record left DNS, TTL the TTL resolvers may
	// hold them after.
	LeftDNS time.Time `json:"left_dns,omitzero"`
	TTL     uint32    `json:"ttl,omitempty"`
	// FirewalledOut is when the firewall last dropped it; zero while it is
	// let in (leaving, or rechecking).
	FirewalledOut time.Time `json:"firewalled_out,omitzero"`
	// Rechecking: let in again after being dropped, for its checks.
	Rechecking bool `json:"rechecking,omitempty"`
	// FailedRechecks counts the rechecks it failed in a row; NextCheck is
	// when the next is due (the back-off, RecheckBackoff).
	FailedRechecks int       `json:"failed_rechecks,omitempty"`
	NextCheck      time.Time `json:"next_check,omitzero"`
}

// Phases of a withdrawal.
const (
	PhaseLeaving    = "leaving"
	PhaseOut        = "firewalled-out"
	PhaseRechecking = "rechecking"
)

// Phase is where the withdrawal is: leaving, firewalled-out or
// rechecking.
func (w Withdrawal) Phase() string {
	switch {
	case w.Rechecking:
		return PhaseRechecking
	case !w.FirewalledOut.IsZero():
		return PhaseOut
	}
	return PhaseLeaving
}

// MaxRecheck is the longest wait between two rechecks of a withdrawn edge
// out of the firewall.
const MaxRecheck = 10 * time.Minute

// RecheckBackoff is the wait from a drop to the next recheck after failed
// rechecks failed in a row: one interval, doubling with each, up to
// MaxRecheck (so a dead edge costs two rule changes every 10 minutes, not
// every round).
func RecheckBackoff(interval time.Duration, failed int) time.Duration {
	return Backoff(interval, MaxRecheck, failed+1)
}

// matches says whether w is still about edge e.
func (w Withdrawal) matches(e Edge) bool {
	return sameAddrOrBoth(w.IPv4, e.IPv4) && sameAddrOrBoth(w.IPv6, e.IPv6)
}

// Withdraw records e as withdrawn, leaving: every convergence takes it
// out of DNS, then, after its wait, out of the firewall.
func (s *State) Withdraw(e Edge, reason string, now time.Time) {
	if s.Withdrawn == nil {
		s.Withdrawn = map[string]Withdrawal{}
	}
	s.Withdrawn[e.Name] = Withdrawal{IPv4: e.IPv4, IPv6: e.IPv6, Since: now, Reason: reason}
}

// Restore forgets e's withdrawal: the next convergence publishes it again
// (firewall, probe, DNS).
func (s *State) Restore(name string) {
	delete(s.Withdrawn, name)
	if len(s.Withdrawn) == 0 {
		s.Withdrawn = nil
	}
}

// IsWithdrawn says whether inventory edge e is withdrawn.
func (s *State) IsWithdrawn(e Edge) bool {
	w, ok := s.Withdrawn[e.Name]
	return ok && w.matches(e)
}

// FirewalledOut says whether inventory edge e is withdrawn and out of the
// firewall (neither leaving nor rechecking).
func (s *State) FirewalledOut(e Edge) bool {
	return s.IsWithdrawn(e) && s.Withdrawn[e.Name].Phase() == PhaseOut
}

// update changes the withdrawal of name, if any.
func (s *State) update(name string, f func(*Withdrawal)) {
	if w, ok := s.Withdrawn[name]; ok {
		f(&w)
		s.Withdrawn[name] = w
	}
}

// leftDNS records that withdrawn name's last record left DNS at now,
// with the TTL resolvers may hold it (the first time only).
func (s *State) leftDNS(name string, ttl uint32, now time.Time) {
	s.update(name, func(w *Withdrawal) {
		if w.LeftDNS.IsZero() {
			w.LeftDNS, w.TTL = now, ttl
		}
	})
}

// firewalledOut records that the firewall dropped withdrawn name at now;
// its next recheck is due after RecheckBackoff.
func (s *State) firewalledOut(name string, interval time.Duration, now time.Time) {
	if interval <= 0 {
		interval = DefaultWatch().Interval
	}
	s.update(name, func(w *Withdrawal) {
		w.FirewalledOut, w.Rechecking = now, false
		w.NextCheck = now.Add(RecheckBackoff(interval, w.FailedRechecks))
	})
}

// Recheck lets withdrawn name in again (the next firewall change does),
// for its checks.
func (s *State) Recheck(name string) {
	s.update(name, func(w *Withdrawal) { w.Rechecking, w.FirewalledOut = true, time.Time{} })
}

// RecheckFailed drops a rechecking name again, its back-off doubled
// (the next firewall change drops it: it left DNS long ago).
func (s *State) RecheckFailed(name string, interval time.Duration, now time.Time) {
	s.update(name, func(w *Withdrawal) { w.FailedRechecks++ })
	s.firewalledOut(name, interval, now)
}

// RecheckDue are the inventory's withdrawn edges out of the firewall
// whose next recheck is due at now.
func RecheckDue(cfg Config, st *State, now time.Time) []Edge {
	var due []Edge
	for _, e := range cfg.Edges {
		if st.FirewalledOut(e) && !now.Before(st.Withdrawn[e.Name].NextCheck) {
			due = append(due, e)
		}
	}
	return due
}

// DropDue are the inventory's withdrawn edges still leaving whose
// resolver wait (their TTL, or a higher one they had shortly before, plus
// slack: as for an edge a rotation removed) is over at now; what is left
// is their drain.
func DropDue(cfg Config, st *State, slack time.Duration, now time.Time) []string {
	var due []string
	for _, e := range cfg.Edges {
		if !st.IsWithdrawn(e) {
			continue
		}
		w := st.Withdrawn[e.Name]
		if w.Phase() != PhaseLeaving || w.LeftDNS.IsZero() {
			continue
		}
		if until, _ := st.cachedUntil(w.LeftDNS, max(w.TTL, uint32(cfg.TTL)), slack); !until.After(now) {
			due = append(due, e.Name)
		}
	}
	return due
}

// Serving is cfg without the edges the state says are withdrawn: what
// every convergence publishes. Withdrawals of edges fleet.yaml no longer
// lists as withdrawn (rotated out, re-addressed) are forgotten; one the
// firewall still lets in leaves it as a removed edge does (draining,
// from when it left DNS).
func Serving(cfg Config, st *State) Config {
	for name, w := range st.Withdrawn {
		if e, ok := cfg.Edge(name); !ok || !w.matches(e) {
			if s := st.Edges[name]; s != nil && w.Phase() != PhaseOut && !w.LeftDNS.IsZero() &&
				sameAddrOrBoth(s.IPv4, w.IPv4) && sameAddrOrBoth(s.IPv6, w.IPv6) {
				s.State, s.LeftDNS, s.TTL = StateDraining, w.LeftDNS, w.TTL
			}
			st.Restore(name)
		}
	}
	if len(st.Withdrawn) == 0 {
		return cfg
	}
	out := cfg
	out.Edges = slices.DeleteFunc(slices.Clone(cfg.Edges), st.IsWithdrawn)
	return out
}

// Allowed are the inventory's edges the firewall lets in: every one but
// the withdrawn edges out of it. Every command that writes the firewall
// lets in these, the state's draining edges and the live unlisted
// addresses, so none of them opens a withdrawn edge the watch dropped.
func Allowed(cfg Config, st *State) []Edge {
	return slices.DeleteFunc(slices.Clone(cfg.Edges), st.FirewalledOut)
}

// Health is an edge's recent checks as the watch decides on them.
type Health struct {
	Edge      string
	Withdrawn bool
	// Rechecking: withdrawn, and let in again for its checks.
	Rechecking bool
	// Fails and Passes are the checks failed and passed in a row (one of
	// them is zero once checked).
	Fails, Passes int
	LastErr       string
}

// Record adds one check to h: a pass resets the failures, a failure the
// passes.
func (h *Health) Record(ok bool, err string) {
	if ok {
		h.Passes, h.Fails = h.Passes+1, 0
		return
	}
	h.Fails, h.Passes, h.LastErr = h.Fails+1, 0, err
}

// Watch actions.
const (
	ActWithdraw = "withdraw"
	ActRestore  = "restore"
	// ActHold is a withdrawal refused: min_edges, or every edge failing.
	ActHold = "hold"
	// ActDrop is a rechecking edge that failed its check: the firewall
	// drops it again, its next recheck backed off.
	ActDrop = "drop"
)

// Action is one decision of a round, logged as one line.
type Action struct {
	Op, Edge, Reason string
	LastErr          string
}

// Decision is what a round decides from the health of the inventory's
// checked edges.
type Decision struct {
	Actions []Action
	// AllFailing: every checked edge failed its last check; nothing is
	// withdrawn (the origin, not the edges, is the likely fault).
	AllFailing bool
}

// Decide is the watch's rule, a pure function of the health history: a
// published edge with fall failed checks in a row is withdrawn, the most
// failed first, as long as at least min(min_edges, inventory) edges stay
// published (the others are held); when every checked edge failed its
// last check nothing is withdrawn or dropped; a withdrawn edge with rise
// passed checks in a row is restored; a rechecking one that failed its
// check is dropped from the firewall again. inventory is the number of
// edges fleet.yaml lists.
func Decide(w Watch, inventory int, edges []Health) Decision {
	var d Decision
	checked, failing := 0, 0
	published := 0
	var candidates []Health
	var drops []Action
	for _, h := range edges {
		if !h.Withdrawn {
			published++
		}
		if h.Fails == 0 && h.Passes == 0 {
			continue // not checked yet: published all the same
		}
		checked++
		if h.Fails > 0 {
			failing++
		}
		if h.Withdrawn {
			switch {
			case h.Passes >= w.Rise:
				d.Actions = append(d.Actions, Action{Op: ActRestore, Edge: h.Edge, Reason: fmt.Sprintf("%d passed checks", h.Passes)})
			case h.Rechecking && h.Fails > 0:
				drops = append(drops, Action{Op: ActDrop, Edge: h.Edge, LastErr: h.LastErr, Reason: "failed its recheck"})
			}
			continue
		}
		if h.Fails >= w.Fall {
			candidates = append(candidates, h)
		}
	}
	if checked > 0 && failing == checked {
		d.AllFailing = true
		for _, h := range candidates {
			d.Actions = append(d.Actions, Action{Op: ActHold, Edge: h.Edge, LastErr: h.LastErr,
				Reason: fmt.Sprintf("%d failed checks, but every edge fails: the origin is the likely fault", h.Fails)})
		}
		return d // a rechecking edge stays let in: the origin, not it, may be at fault
	}
	d.Actions = append(d.Actions, drops...)
	sort.SliceStable(candidates, func(i, j int) bool {
		if candidates[i].Fails != candidates[j].Fails {
			return candidates[i].Fails > candidates[j].Fails
		}
		return candidates[i].Edge < candidates[j].Edge
	})
	floor := min(w.MinEdges, inventory)
	// Restorations of this round count: they publish again first.
	left := published
	for _, a := range d.Actions {
		if a.Op == ActRestore {
			left++
		}
	}
	for _, h := range candidates {
		if left-1 < floor {
			d.Actions = append(d.Actions, Action{Op: ActHold, Edge: h.Edge, LastErr: h.LastErr,
				Reason: fmt.Sprintf("%d failed checks, but withdrawing it would leave %d published, below min_edges %d", h.Fails, left-1, floor)})
			continue
		}
		left--
		d.Actions = append(d.Actions, Action{Op: ActWithdraw, Edge: h.Edge, LastErr: h.LastErr, Reason: fmt.Sprintf("%d failed checks", h.Fails)})
	}
	return d
}

// PublishedAddrs says whether any address of e is in live.
func PublishedAddrs(e Edge, live RRSet) bool {
	return slices.ContainsFunc(e.Addrs(), func(a netip.Addr) bool { return live.Has(a) })
}

// Backoff is the wait after failures failed attempts in a row: base,
// doubling with each, up to limit (the replace hook: 30 s to 30 min by
// default; a recheck: RecheckBackoff).
func Backoff(base, limit time.Duration, failures int) time.Duration {
	d := base
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// ParseReplacement reads what the replace hook printed: exactly one JSON
// object {"name", "ipv4", "ipv6", "ssh", "host_key"} ("metrics" too,
// optional), with a valid edge name and at least one address, each of
// its family.
func ParseReplacement(b []byte) (Edge, error) {
	var r struct {
		Name    string `json:"name"`
		IPv4    string `json:"ipv4"`
		IPv6    string `json:"ipv6"`
		SSH     string `json:"ssh"`
		HostKey string `json:"host_key"`
		Metrics string `json:"metrics"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Edge{}, fmt.Errorf("the hook's output is not one JSON object: %w", err)
	}
	if dec.More() {
		return Edge{}, errors.New("the hook printed more than one JSON object")
	}
	e := Edge{Name: r.Name, IPv4: r.IPv4, IPv6: r.IPv6, SSH: r.SSH, HostKey: r.HostKey, Metrics: r.Metrics}
	if !edgeName.MatchString(e.Name) || len(e.Name) > maxEdgeName {
		return Edge{}, fmt.Errorf("the hook's name %q is not an edge name", e.Name)
	}
	if e.IPv4 == "" && e.IPv6 == "" {
		return Edge{}, fmt.Errorf("the hook gave edge %s no address", e.Name)
	}
	for fam, s := range map[string]string{"ipv4": e.IPv4, "ipv6": e.IPv6} {
		if s == "" {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil || (fam == "ipv4") != a.Is4() {
			return Edge{}, fmt.Errorf("the hook's %s %q is not an %s address", fam, s, strings.ToUpper(fam[:2])+fam[2:])
		}
	}
	return e, nil
}
