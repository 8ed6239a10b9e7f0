package relay

import (
	"cmp"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// origin is one configured origin address and its OFFLINE state.
type origin struct {
	addr     string
	name     string         // what the edge calls it in metrics and logs, never the address
	ap       netip.AddrPort // addr when it is an IP literal; else resolved per connection
	offline  bool
	failedAt time.Time // last failed connect; meaningful while offline
	// claim is the plan that is retrying this OFFLINE origin (0: none).
	// One retry at a time: while it is in flight, other connections take
	// the next selectable origin instead of paying connect_timeout too.
	claim uint64
	// active counts the connections dialling or relayed to this origin
	// (least-conn's measure). Shared with the value that replaces this one
	// when the origin is renamed, so the connections under way leave it
	// even counted.
	active *atomic.Int64
}

// originSet orders the origins for each new connection by the balance:
// failover in configured order, round-robin from a start that turns by
// one each connection, least-conn by fewest connections (round robin among
// equals). OFFLINE ones are skipped until offline_retry has passed since
// their failure, and when every origin is OFFLINE the least recently
// failed one is tried.
type originSet struct {
	retry   time.Duration
	balance string
	// gauge, when set, records an origin's state (up 1 or 0) or its
	// removal (gone), by name; it is called under mu, so that a state
	// change made by a dial that was under way when set removed its
	// origin cannot bring the removed origin's series back.
	gauge func(name string, up, gone bool)

	mu    sync.Mutex
	list  []*origin
	plans uint64 // the last plan's claim number
	turn  int    // round-robin's next start among the selectable origins
}

func newOriginSet(origins []Origin, retry time.Duration, balance string) *originSet {
	if balance == "" {
		balance = BalanceFailover
	}
	s := &originSet{retry: retry, balance: balance}
	s.set(origins)
	return s
}

// set replaces the list (names filled in by position where missing),
// keeping the state of the addresses that stay.
func (s *originSet) set(origins []Origin) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := map[string]*origin{}
	oldNames := map[string]bool{}
	for _, o := range s.list {
		old[o.addr] = o
		oldNames[o.name] = true
	}
	list := make([]*origin, 0, len(origins))
	for _, c := range named(origins) {
		o := old[c.Address]
		if o == nil || o.name != c.Name {
			// A new origin, or a new name for one: a fresh value, since
			// the loops read addr and name without the lock. A renamed
			// origin keeps its OFFLINE state.
			n := &origin{addr: c.Address, name: c.Name, active: new(atomic.Int64)}
			if ap, err := netip.ParseAddrPort(c.Address); err == nil {
				n.ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			}
			if o != nil {
				n.offline, n.failedAt, n.active = o.offline, o.failedAt, o.active
			}
			o = n
		}
		delete(oldNames, c.Name)
		list = append(list, o)
	}
	s.list = list
	if s.gauge != nil {
		for n := range oldNames {
			s.gauge(n, false, true)
		}
		for _, o := range list {
			s.gauge(o.name, !o.offline, false)
		}
	}
}

// plan returns the origins to try, in order, for a connection made at
// now, and the plan's claim: every OFFLINE origin in it is retried by this
// plan alone until release. Selectable origins come in the balance's
// order; an OFFLINE origin whose offline_retry has passed is retried
// unless another plan retries it already — under failover in its
// configured place, under round-robin and least-conn first (the next
// connection finds out whether it is back, as it would under failover
// where the first origin is the one that matters). When that leaves
// nothing, the least recently failed OFFLINE origin nobody retries, or
// else the one being retried (there is no other way to reach anything).
func (s *originSet) plan(now time.Time) ([]*origin, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plans++
	claim := s.plans
	var up, due []*origin
	var oldest, oldestClaimed *origin
	for _, o := range s.list {
		switch {
		case !o.offline:
			up = append(up, o)
		case o.claim != 0:
			if oldestClaimed == nil || o.failedAt.Before(oldestClaimed.failedAt) {
				oldestClaimed = o
			}
		case now.Sub(o.failedAt) >= s.retry:
			o.claim = claim
			due = append(due, o)
			if s.balance == BalanceFailover {
				up = append(up, o) // in its configured place
			}
		case oldest == nil || o.failedAt.Before(oldest.failedAt):
			oldest = o
		}
	}
	var out []*origin
	switch s.balance {
	case BalanceFailover:
		out = up
	default:
		if len(up) > 1 {
			k := s.turn % len(up)
			s.turn = k + 1
			up = slices.Concat(up[k:], up[:k])
			if s.balance == BalanceLeastConn {
				slices.SortStableFunc(up, func(a, b *origin) int {
					return cmp.Compare(a.active.Load(), b.active.Load())
				})
			}
		}
		out = append(due, up...)
	}
	if len(out) == 0 {
		switch {
		case oldest != nil:
			oldest.claim = claim
			out = append(out, oldest)
		case oldestClaimed != nil:
			out = append(out, oldestClaimed)
		}
	}
	return out, claim
}

// release ends the retries plan claim made on the origins of list.
func (s *originSet) release(list []*origin, claim uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range list {
		if o.claim == claim {
			o.claim = 0
		}
	}
}

// fail marks o OFFLINE from now and reports whether it was selectable
// before (a state change worth logging).
func (s *originSet) fail(o *origin, now time.Time) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed = !o.offline
	o.offline, o.failedAt = true, now
	if changed && s.gauge != nil && s.listed(o) {
		s.gauge(o.name, false, false)
	}
	return changed
}

// ok marks o selectable again and reports whether it was OFFLINE.
func (s *originSet) ok(o *origin) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed = o.offline
	o.offline = false
	if changed && s.gauge != nil && s.listed(o) {
		s.gauge(o.name, true, false)
	}
	return changed
}

// listed reports whether o is still one of the configured origins (s.mu
// held).
func (s *originSet) listed(o *origin) bool {
	for _, x := range s.list {
		if x == o {
			return true
		}
	}
	return false
}

// names returns the configured origins' names in order.
func (s *originSet) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.list))
	for i, o := range s.list {
		out[i] = o.name
	}
	return out
}
