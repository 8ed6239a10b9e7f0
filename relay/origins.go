package relay

import (
	"net/netip"
	"sync"
	"time"
)

// origin is one configured origin address and its OFFLINE state.
type origin struct {
	addr     string
	ap       netip.AddrPort // addr when it is an IP literal; else resolved per connection
	offline  bool
	failedAt time.Time // last failed connect; meaningful while offline
	// claim is the plan that is retrying this OFFLINE origin (0: none).
	// One retry at a time: while it is in flight, other connections take
	// the next selectable origin instead of paying connect_timeout too.
	claim uint64
}

// originSet orders the origins for each new connection: configured order,
// OFFLINE ones skipped until offline_retry has passed since their failure,
// and when every origin is OFFLINE the least recently failed one.
type originSet struct {
	retry time.Duration
	// gauge, when set, records an origin's state (up 1 or 0) or its
	// removal (gone); it is called under mu, so that a state change made
	// by a dial that was under way when set removed its origin cannot
	// bring the removed origin's series back.
	gauge func(addr string, up, gone bool)

	mu    sync.Mutex
	list  []*origin
	plans uint64 // the last plan's claim number
}

func newOriginSet(addrs []string, retry time.Duration) *originSet {
	s := &originSet{retry: retry}
	s.set(addrs)
	return s
}

// set replaces the list, keeping the state of origins that stay, and
// returns the addresses that were removed.
func (s *originSet) set(addrs []string) (removed []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := map[string]*origin{}
	for _, o := range s.list {
		old[o.addr] = o
	}
	list := make([]*origin, 0, len(addrs))
	for _, a := range addrs {
		o := old[a]
		if o == nil {
			o = &origin{addr: a}
			if ap, err := netip.ParseAddrPort(a); err == nil {
				o.ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			}
		}
		delete(old, a)
		list = append(list, o)
	}
	for a := range old {
		removed = append(removed, a)
	}
	s.list = list
	if s.gauge != nil {
		for _, a := range removed {
			s.gauge(a, false, true)
		}
		for _, o := range list {
			s.gauge(o.addr, !o.offline, false)
		}
	}
	return removed
}

// plan returns the origins to try, in order, for a connection made at
// now, and the plan's claim: every OFFLINE origin in it is retried by this
// plan alone until release. Selectable origins come in configured order
// with the OFFLINE ones whose offline_retry has passed, unless another
// plan retries them already; when that leaves nothing, the least recently
// failed OFFLINE origin nobody retries, or else the one being retried
// (there is no other way to reach anything).
func (s *originSet) plan(now time.Time) ([]*origin, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plans++
	claim := s.plans
	var out []*origin
	var oldest, oldestClaimed *origin
	for _, o := range s.list {
		switch {
		case !o.offline:
			out = append(out, o)
		case o.claim != 0:
			if oldestClaimed == nil || o.failedAt.Before(oldestClaimed.failedAt) {
				oldestClaimed = o
			}
		case now.Sub(o.failedAt) >= s.retry:
			o.claim = claim
			out = append(out, o)
		case oldest == nil || o.failedAt.Before(oldest.failedAt):
			oldest = o
		}
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
		s.gauge(o.addr, false, false)
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
		s.gauge(o.addr, true, false)
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

// states returns the configured addresses and whether each is up (not
// OFFLINE), for the origin_up gauge.
func (s *originSet) states() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]bool, len(s.list))
	for _, o := range s.list {
		m[o.addr] = !o.offline
	}
	return m
}

// addrs returns the configured addresses in order.
func (s *originSet) addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.list))
	for i, o := range s.list {
		out[i] = o.addr
	}
	return out
}
