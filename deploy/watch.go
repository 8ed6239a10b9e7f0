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
	// Interval is the mean pause between two rounds of checks; each pause
	// is drawn uniformly from [0, 2·interval) (full jitter).
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

// Pause is the wait before the next round: full jitter, uniform in
// [0, 2·interval), so the rounds of several watches never fall in step
// and their mean is interval. r is a uniform float in [0, 1) (nil: the
// process's random source).
func (w Watch) Pause(r func() float64) time.Duration {
	if r == nil {
		r = rand.Float64
	}
	return time.Duration(r() * float64(2*w.Interval))
}

// Withdrawal is an inventory edge `fleet watch` took out of DNS: it
// stays in fleet.yaml, and every convergence leaves it unpublished until
// the watch restores it. The addresses are the ones withdrawn: an edge
// re-addressed in fleet.yaml (a rotation) is no longer the one withdrawn.
type Withdrawal struct {
	IPv4   string    `json:"ipv4,omitempty"`
	IPv6   string    `json:"ipv6,omitempty"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason"`
}

// matches says whether w is still about edge e.
func (w Withdrawal) matches(e Edge) bool {
	return sameAddrOrBoth(w.IPv4, e.IPv4) && sameAddrOrBoth(w.IPv6, e.IPv6)
}

// Withdraw records e as withdrawn.
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

// Serving is cfg without the edges the state says are withdrawn: what
// every convergence publishes and the firewall lets in (plus what
// drains). Withdrawals of edges fleet.yaml no longer lists as withdrawn
// (rotated out, re-addressed) are forgotten.
func Serving(cfg Config, st *State) Config {
	for name, w := range st.Withdrawn {
		if e, ok := cfg.Edge(name); !ok || !w.matches(e) {
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

// Health is an edge's recent checks as the watch decides on them.
type Health struct {
	Edge      string
	Withdrawn bool
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
// last check nothing is withdrawn; a withdrawn edge with rise passed
// checks in a row is restored. inventory is the number of edges
// fleet.yaml lists.
func Decide(w Watch, inventory int, edges []Health) Decision {
	var d Decision
	checked, failing := 0, 0
	published := 0
	var candidates []Health
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
			if h.Passes >= w.Rise {
				d.Actions = append(d.Actions, Action{Op: ActRestore, Edge: h.Edge, Reason: fmt.Sprintf("%d passed checks", h.Passes)})
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
		return d
	}
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

// Backoff is the wait before the next run of the replace hook after
// failures failed ones in a row: base, doubling each time, up to 60·base
// (30 s to 30 min by default).
func Backoff(base time.Duration, failures int) time.Duration {
	d := base
	for i := 1; i < failures && d < 60*base; i++ {
		d *= 2
	}
	return min(d, 60*base)
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
