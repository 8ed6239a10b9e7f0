package relay

import (
	"sync"
	"time"
)

// origin is one configured origin address and its OFFLINE state.
type origin struct {
	addr     string
	offline  bool
	failedAt time.Time // last failed connect; meaningful while offline
}

// originSet orders the origins for each new connection: configured order,
// OFFLINE ones skipped until offline_retry has passed since their failure,
// and when every origin is OFFLINE the least recently failed one.
type originSet struct {
	retry time.Duration

	mu   sync.Mutex
	list []*origin
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
		}
		delete(old, a)
		list = append(list, o)
	}
	for a := range old {
		removed = append(removed, a)
	}
	s.list = list
	return removed
}

// plan returns the origins to try, in order, for a connection made at now.
func (s *originSet) plan(now time.Time) []*origin {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*origin
	var oldest *origin
	for _, o := range s.list {
		if !o.offline || now.Sub(o.failedAt) >= s.retry {
			out = append(out, o)
			continue
		}
		if oldest == nil || o.failedAt.Before(oldest.failedAt) {
			oldest = o
		}
	}
	if len(out) == 0 && oldest != nil {
		out = append(out, oldest)
	}
	return out
}

// fail marks o OFFLINE from now and reports whether it was selectable
// before (a state change worth logging).
func (s *originSet) fail(o *origin, now time.Time) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed = !o.offline
	o.offline, o.failedAt = true, now
	return changed
}

// ok marks o selectable again and reports whether it was OFFLINE.
func (s *originSet) ok(o *origin) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed = o.offline
	o.offline = false
	return changed
}

// addrs returns the configured addresses and whether each is up (not
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
