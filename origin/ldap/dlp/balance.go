package dlp

import (
	"cmp"
	"slices"
	"sync"
)

// Balancers runs the LoadBalancer objects of a file: for each operation
// of a balance(LB) rule, Select orders the balancer's servers — the one
// to use first, then the failover order — by the algorithm of seed 003
// (docs/balancers.md). Like the Router it is shared by every client connection
// of a core, so its state (the failover route in use, the optimal route,
// the proportional counters, the alert marks) is the whole core's.
//
// OFFLINE servers are left out, as in a forwardto list: an empty list
// fails the operation with unavailable (52).
type Balancers struct {
	h    *Health
	load *Load
	lbs  map[string]*balance

	// Alert, when set, is called each time a route of a balancer with an
	// alert level reaches it (once per crossing: the route must drop
	// below the level before it alerts again). It runs with the
	// balancer's lock held and must not call back into Balancers.
	Alert func(balancer, server string, saturation float64)
}

// Op is what a balancer knows of one operation.
type Op struct {
	Type        string   // wire.OpName: bind, search, compare, add, modify, delete, modrdn, extended
	FilterAttrs []string // a search filter's attribute names, lower case
}

type balance struct {
	cfg *Balancer

	mu      sync.Mutex
	active  map[string]string // failover without switchback: the server in use, by operation type
	current string            // optimal: the route in use
	swrr    map[string][]int  // proportional: smooth weighted round robin counters by operation type, per route
	alerted map[string]bool   // saturation: routes at or above the alert level
}

// NewBalancers returns the balancers of f, using h for the OFFLINE state
// and l for saturation.
func NewBalancers(f *File, h *Health, l *Load) *Balancers {
	bs := &Balancers{h: h, load: l, lbs: map[string]*balance{}}
	for name, cfg := range f.Balancers {
		bs.lbs[name] = &balance{cfg: cfg, active: map[string]string{}, swrr: map[string][]int{}, alerted: map[string]bool{}}
	}
	return bs
}

// Select orders the servers of balancer name for op: the first is the
// algorithm's choice, the rest are tried in order when it fails. Nil when
// no route can take op (every route OFFLINE, weight 0, or a search no
// searchfilter route accepts).
func (bs *Balancers) Select(name string, op Op) []string {
	b := bs.lbs[name]
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	up := make([]*Route, 0, len(b.cfg.Routes))
	for _, r := range b.cfg.Routes {
		if !bs.h.Offline(r.Server) {
			up = append(up, r)
		}
	}
	bs.observe(name, b)
	var order []*Route
	switch b.cfg.Algorithm {
	case "failover":
		order = b.failover(up, op)
	case "optimal":
		order = b.optimal(up, bs.saturation)
	case "proportional":
		order = b.proportional(up, op)
	case "saturation":
		order = b.saturated(up, op, bs.saturation)
	case "searchfilter":
		order = b.searchfilter(up, op)
	}
	out := make([]string, len(order))
	for i, r := range order {
		out[i] = r.Server
	}
	return out
}

// Observe re-evaluates every balancer's alert levels; the monitor calls it
// after every check of every server, so a route crossing its level alerts
// even when no operation selects through its balancer.
func (bs *Balancers) Observe() {
	for name, b := range bs.lbs {
		b.mu.Lock()
		bs.observe(name, b)
		b.mu.Unlock()
	}
}

// saturation of a route for the algorithms: a down route counts 100 %.
func (bs *Balancers) saturation(server string) float64 {
	if bs.h.Offline(server) {
		return 100
	}
	return bs.load.Saturation(server)
}

// observe fires the alerts of b (b.mu held). OFFLINE routes do not alert:
// their outage is logged as such.
func (bs *Balancers) observe(name string, b *balance) {
	if b.cfg.Alert == 0 {
		return
	}
	for _, r := range b.cfg.Routes {
		sat := bs.load.Saturation(r.Server)
		switch above := sat >= b.cfg.Alert && !bs.h.Offline(r.Server); {
		case above && !b.alerted[r.Server]:
			b.alerted[r.Server] = true
			if bs.Alert != nil {
				bs.Alert(name, r.Server, sat)
			}
		case !above:
			delete(b.alerted, r.Server)
		}
	}
}

// byPriority sorts routes by their priority for op, file order on ties.
func byPriority(routes []*Route, op string) []*Route {
	out := slices.Clone(routes)
	slices.SortStableFunc(out, func(a, b *Route) int { return cmp.Compare(a.PriorityFor(op), b.PriorityFor(op)) })
	return out
}

// toFront moves the route of server to the front of order.
func toFront(order []*Route, server string) []*Route {
	i := slices.IndexFunc(order, func(r *Route) bool { return r.Server == server })
	if i > 0 {
		r := order[i]
		copy(order[1:i+1], order[:i])
		order[0] = r
	}
	return order
}

// failover: the best priority for the operation type; without
// switchback, the route an operation type failed over to keeps it until
// that route fails in turn.
func (b *balance) failover(up []*Route, op Op) []*Route {
	order := byPriority(up, op.Type)
	if len(order) == 0 || b.cfg.Switchback {
		return order
	}
	if a := b.active[op.Type]; slices.ContainsFunc(order, func(r *Route) bool { return r.Server == a }) {
		return toFront(order, a)
	}
	b.active[op.Type] = order[0].Server
	return order
}

// Failed tells the balancers that server failed: a connect or I/O failure
// marked it OFFLINE, or the monitor's check found it down. A failover
// balancer without switchback moves every operation type that server
// carries to the type's next priority at once, so that the type stays
// there when the server comes back (seed 003: "Even when Server 1 is up
// again, Server 2 continues to handle incoming Add requests"). The core
// calls it whenever it marks a server OFFLINE, including in the middle of
// the connect walk that fails an operation over: the Select that started
// the walk still named the failed server first.
func (bs *Balancers) Failed(server string) {
	for _, b := range bs.lbs {
		if b.cfg.Algorithm != "failover" || b.cfg.Switchback {
			continue
		}
		b.mu.Lock()
		b.failed(server, bs.h)
		b.mu.Unlock()
	}
}

// failed moves b's operation types off server (b.mu held).
func (b *balance) failed(server string, h *Health) {
	var was, up []*Route // the routes before the failure, and those left
	for _, r := range b.cfg.Routes {
		switch {
		case r.Server == server:
			was = append(was, r)
		case !h.Offline(r.Server):
			was, up = append(was, r), append(up, r)
		}
	}
	if len(was) == len(up) {
		return // not one of b's routes
	}
	for _, op := range oprTypes {
		cur, ok := b.active[op]
		if !ok {
			cur = byPriority(was, op)[0].Server
		}
		if cur != server {
			continue
		}
		if next := byPriority(up, op); len(next) > 0 {
			b.active[op] = next[0].Server
		} else {
			delete(b.active, op) // nothing left: the next Select picks among what is up then
		}
	}
}

// optimal: the least saturated route; the route in use keeps the traffic
// until another is lower by more than the precision.
func (b *balance) optimal(up []*Route, sat func(string) float64) []*Route {
	if len(up) == 0 {
		return nil
	}
	s := make(map[string]float64, len(up))
	for _, r := range up {
		s[r.Server] = sat(r.Server)
	}
	order := slices.Clone(up)
	slices.SortStableFunc(order, func(x, y *Route) int { return cmp.Compare(s[x.Server], s[y.Server]) })
	cur, ok := s[b.current]
	if !ok || cur-s[order[0].Server] > b.cfg.Precision {
		b.current = order[0].Server
	}
	return toFront(order, b.current)
}

// proportional: smooth weighted round robin (as nginx's upstream), per
// operation type over the routes that are up with a weight above 0. It is
// deterministic: weights 2:1:1 give A B C A, A B C A, … whoever asks.
func (b *balance) proportional(up []*Route, op Op) []*Route {
	cur := b.swrr[op.Type]
	if cur == nil {
		cur = make([]int, len(b.cfg.Routes))
		b.swrr[op.Type] = cur
	}
	best, total := -1, 0
	var order []*Route
	for i, r := range b.cfg.Routes {
		w := r.WeightFor(op.Type)
		if w == 0 || !slices.Contains(up, r) {
			continue
		}
		order = append(order, r)
		cur[i] += w
		total += w
		if best < 0 || cur[i] > cur[best] {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	cur[best] -= total
	slices.SortStableFunc(order, func(x, y *Route) int { return cmp.Compare(y.WeightFor(op.Type), x.WeightFor(op.Type)) })
	return toFront(order, b.cfg.Routes[best].Server)
}

// saturated: the best priority below the threshold; when every route is
// at or above it, the least saturated.
func (b *balance) saturated(up []*Route, op Op, sat func(string) float64) []*Route {
	order := byPriority(up, op.Type)
	for _, r := range order {
		if sat(r.Server) < b.cfg.Threshold {
			return toFront(order, r.Server)
		}
	}
	s := make(map[string]float64, len(order))
	for _, r := range order {
		s[r.Server] = sat(r.Server)
	}
	slices.SortStableFunc(order, func(x, y *Route) int { return cmp.Compare(s[x.Server], s[y.Server]) })
	return order
}

// searchfilter: a search goes to the best-priority route whose allowed
// attributes its filter mentions (one at least) and whose prohibited ones
// it does not reach under any name (attrs.go), then to the pass-through
// routes (no lists); any other operation goes by priority. Routes of
// equal priority keep file order (seed 003: "any route can process the
// request"; the first one written does, every time).
func (b *balance) searchfilter(up []*Route, op Op) []*Route {
	order := byPriority(up, op.Type)
	if op.Type != "search" {
		return order
	}
	attrs := make([]string, len(op.FilterAttrs))
	for i, a := range op.FilterAttrs {
		attrs[i] = CanonicalAttr(a)
	}
	var match, pass []*Route
	for _, r := range order {
		switch {
		case len(r.Allowed) == 0:
			pass = append(pass, r)
		case mentions(attrs, r.Allowed) && !reachesAny(attrs, r.Prohibited):
			match = append(match, r)
		}
	}
	return append(match, pass...)
}

// mentions reports whether attrs (canonical) names an attribute of list.
func mentions(attrs, list []string) bool {
	for _, a := range list {
		if slices.Contains(attrs, a) {
			return true
		}
	}
	return false
}

// reachesAny reports whether a filter on attrs (canonical) tests the
// values of an attribute of list.
func reachesAny(attrs, list []string) bool {
	for _, p := range list {
		for _, a := range attrs {
			if reaches(a, p) {
				return true
			}
		}
	}
	return false
}
