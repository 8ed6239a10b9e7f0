package dlp

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// LoadBalancer objects of the file (docs/balancers.md): what each algorithm
// reads, checked with the same positions and messages as every other
// object. This file only parses; the types and their queries are in
// dlp.go, and Balancers (balance.go) runs them beside the Router.

// DefaultCapacity is a route's capacity when the file gives none.
const DefaultCapacity = 64

// maxRouteValue bounds priorities, weights and capacities.
const maxRouteValue = 1000000

// routeOpTypes are the keys of a priority or weight object.
var routeOpTypes = append(slices.Clone(oprTypes), "default")

// The algorithms that read each key; a key another algorithm would
// silently ignore is an error.
var (
	lbKeyUse = map[string][]string{
		"switchback": {"failover"},
		"precision":  {"optimal"},
		"threshold":  {"saturation"},
		"alert":      {"saturation"},
	}
	routeKeys   = []string{"server", "priority", "weight", "capacity", "allowed", "prohibited"}
	routeKeyUse = map[string][]string{
		"priority":   {"failover", "saturation", "searchfilter"},
		"weight":     {"proportional"},
		"allowed":    {"searchfilter"},
		"prohibited": {"searchfilter"},
	}
)

// routePos is where a route is written, for the checks made once every
// LdapServer is known.
type routePos struct {
	where, key       string // `LoadBalancer "LB1"`, "routes[2]"
	server, capacity int    // offsets; capacity is -1 when not written
}

func algList(algs []string) string {
	if len(algs) == 1 {
		return "the " + algs[0] + " algorithm"
	}
	return "the " + strings.Join(algs[:len(algs)-1], ", ") + " and " + algs[len(algs)-1] + " algorithms"
}

// balancerKeys reads the algorithm's keys and the routes.
func (o *obj) balancerKeys(lb *Balancer) {
	lb.Precision = 5
	for _, m := range o.n.obj {
		if algs := lbKeyUse[m.key]; algs != nil && lb.Algorithm != "" && !slices.Contains(algs, lb.Algorithm) {
			o.b.errAt(m.keyPos, o.where, m.key, "applies to %s only", algList(algs))
		}
	}
	switch lb.Algorithm {
	case "failover":
		lb.Switchback = o.flag("switchback", false)
	case "optimal":
		if v, ok := o.percent("precision", true); ok {
			lb.Precision = v
		}
	case "saturation":
		if o.n.get("threshold") == nil {
			o.objErr(`missing key "threshold" (percent; the saturation algorithm needs one)`)
		} else if v, ok := o.percent("threshold", false); ok {
			lb.Threshold = v
		}
		if v, ok := o.percent("alert", false); ok {
			lb.Alert = v
		}
	}
	n := o.n.get("routes")
	switch {
	case n == nil:
		o.objErr(`missing key "routes"`)
		return
	case n.kind != 'a':
		o.keyErr("routes", "must be an array of route objects, found %s", n.kindName())
		return
	case len(n.arr) == 0:
		o.keyErr("routes", "must list at least one route")
		return
	}
	first := map[string]int{} // server → route number
	for i, rn := range n.arr {
		r := o.route(lb, i+1, rn)
		if r == nil {
			continue
		}
		if r.Server != "" {
			if j, dup := first[r.Server]; dup {
				o.b.errAt(o.b.routeAt[r].server, o.where, fmt.Sprintf("routes[%d].server", i+1), "%q is already route %d", r.Server, j)
			} else {
				first[r.Server] = i + 1
			}
		}
		lb.Routes = append(lb.Routes, r)
	}
	if lb.Algorithm == "proportional" && len(lb.Routes) > 0 {
		var never []string
		for _, op := range oprTypes {
			if !slices.ContainsFunc(lb.Routes, func(r *Route) bool { return r.WeightFor(op) > 0 }) {
				never = append(never, op)
			}
		}
		if len(never) > 0 {
			o.keyErr("routes", "every route has weight 0 for %s: such operations could never be served", strings.Join(never, ", "))
		}
	}
}

// percent reads a percentage; ok is false when absent or invalid (reported).
func (o *obj) percent(key string, allowZero bool) (float64, bool) {
	v, present, ok := o.number(key)
	if !present || !ok {
		return 0, false
	}
	if v < 0 || v > 100 || (v == 0 && !allowZero) {
		rng := "0..100"
		if !allowZero {
			rng = "above 0 and at most 100"
		}
		o.keyErr(key, "must be a percentage %s, found %s", rng, o.n.get(key).text)
		return 0, false
	}
	return v, true
}

// route reads routes[i]; nil when it is not an object.
func (o *obj) route(lb *Balancer, i int, n *node) *Route {
	b := o.b
	key := fmt.Sprintf("routes[%d]", i)
	if n.kind != 'o' {
		b.errAt(n.pos, o.where, key, "must be an object, found %s", n.kindName())
		return nil
	}
	r := &Route{Capacity: DefaultCapacity}
	at := routePos{where: o.where, key: key, server: n.pos, capacity: -1}
	uses := func(k string) bool {
		algs := routeKeyUse[k]
		return algs == nil || lb.Algorithm == "" || slices.Contains(algs, lb.Algorithm)
	}
	seen := map[string]bool{}
	for _, m := range n.obj {
		sub := key + "." + m.key
		switch {
		case seen[m.key]:
			b.errAt(m.keyPos, o.where, sub, "duplicate key")
			continue
		case !slices.Contains(routeKeys, m.key):
			hint := ""
			for _, k := range routeKeys {
				if strings.EqualFold(k, m.key) {
					hint = fmt.Sprintf(" (did you mean %q?)", k)
				}
			}
			b.errAt(m.keyPos, o.where, sub, "unknown key%s", hint)
			continue
		case !uses(m.key):
			b.errAt(m.keyPos, o.where, sub, "applies to %s only", algList(routeKeyUse[m.key]))
			continue
		}
		seen[m.key] = true
		v := m.val
		switch m.key {
		case "server":
			at.server = v.pos
			if v.kind != 's' || v.str == "" {
				b.errAt(v.pos, o.where, sub, "must be the name of an LdapServer, found %s", show(v))
			} else {
				r.Server = v.str
			}
		case "priority":
			r.Priority = o.byOp(v, sub, 1)
		case "weight":
			r.Weight = o.byOp(v, sub, 0)
		case "capacity":
			at.capacity = m.keyPos
			if c, ok := intIn(v, 1, maxRouteValue); ok {
				r.Capacity = c
			} else {
				b.errAt(v.pos, o.where, sub, "must be an integer 1..%d (operations in flight at 100 %% saturation), found %s", maxRouteValue, show(v))
			}
		case "allowed":
			r.Allowed = o.attrs(v, sub)
		case "prohibited":
			r.Prohibited = o.attrs(v, sub)
		}
	}
	if !seen["server"] {
		b.errAt(n.pos, o.where, key, `missing key "server"`)
	}
	if lb.Algorithm != "" && slices.Contains(routeKeyUse["priority"], lb.Algorithm) && !seen["priority"] {
		b.errAt(n.pos, o.where, key, `missing key "priority" (a number, or an object of numbers by operation type; lower is preferred)`)
	}
	if len(r.Prohibited) > 0 && len(r.Allowed) == 0 {
		b.errAt(keyPos(n, "prohibited"), o.where, key+".prohibited",
			"needs allowed attributes too: a search matches a route by an allowed attribute (a pass-through route has neither list)")
	}
	for _, a := range r.Prohibited {
		if slices.Contains(r.Allowed, a) {
			b.errAt(keyPos(n, "prohibited"), o.where, key+".prohibited", "%q is both allowed and prohibited", a)
		}
	}
	b.routeAt[r] = at
	return r
}

func intIn(n *node, lo, hi int) (int, bool) {
	if n.kind != 'n' || n.num != math.Trunc(n.num) || n.num < float64(lo) || n.num > float64(hi) {
		return 0, false
	}
	return int(n.num), true
}

// byOp reads a priority or weight: a number (for every operation type)
// or an object of numbers by operation type, "default" for the rest.
func (o *obj) byOp(n *node, key string, lo int) map[string]int {
	b := o.b
	out := map[string]int{}
	switch n.kind {
	case 'n':
		v, ok := intIn(n, lo, maxRouteValue)
		if !ok {
			b.errAt(n.pos, o.where, key, "must be an integer %d..%d, found %s", lo, maxRouteValue, n.text)
			return nil
		}
		out["default"] = v
	case 'o':
		for _, m := range n.obj {
			switch _, dup := out[m.key]; {
			case !slices.Contains(routeOpTypes, m.key):
				b.errAt(m.keyPos, o.where, key, "unknown operation type %q (want %s)", m.key, strings.Join(routeOpTypes, ", "))
			case dup:
				b.errAt(m.keyPos, o.where, key, "%s is given twice", m.key)
			default:
				v, ok := intIn(m.val, lo, maxRouteValue)
				if !ok {
					b.errAt(m.val.pos, o.where, key+"."+m.key, "must be an integer %d..%d, found %s", lo, maxRouteValue, show(m.val))
					continue
				}
				out[m.key] = v
			}
		}
	default:
		b.errAt(n.pos, o.where, key, "must be an integer %d..%d or an object of them by operation type, found %s", lo, maxRouteValue, show(n))
		return nil
	}
	return out
}

// attrs reads an attribute list; names compare in lower case, as the
// wire parser reports a filter's attributes.
func (o *obj) attrs(n *node, key string) []string {
	if n.kind != 'a' {
		o.b.errAt(n.pos, o.where, key, "must be an array of attribute names, found %s", n.kindName())
		return nil
	}
	var out []string
	for _, e := range n.arr {
		if e.kind != 's' || e.str == "" || strings.ContainsAny(e.str, " \t()=*") {
			o.b.errAt(e.pos, o.where, key, "must be an array of attribute names, found %s", show(e))
			continue
		}
		a := CanonicalAttr(e.str)
		if slices.Contains(out, a) {
			as := ""
			if a != strings.ToLower(e.str) {
				as = " (as " + a + ")"
			}
			o.b.errAt(e.pos, o.where, key, "%q is listed twice%s", e.str, as)
			continue
		}
		out = append(out, a)
	}
	return out
}

// resolveRoutes checks the routes' servers once every LdapServer is
// known: each must exist, and a server named by several routes has one
// capacity (saturation is a server's, docs/balancers.md).
func (b *builder) resolveRoutes() {
	type written struct {
		r  *Route
		at routePos
	}
	var all []written
	for r, at := range b.routeAt {
		if r.Server != "" {
			all = append(all, written{r, at})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].at.server < all[j].at.server })
	first := map[string]written{}
	for _, w := range all {
		if b.f.Servers[w.r.Server] == nil {
			b.errAt(w.at.server, w.at.where, w.at.key+".server", "no LdapServer named %q", w.r.Server)
			continue
		}
		f, ok := first[w.r.Server]
		if !ok {
			first[w.r.Server] = w
			continue
		}
		if f.r.Capacity != w.r.Capacity {
			off := w.at.capacity
			if off < 0 {
				off = w.at.server
			}
			line, _ := position(b.text, f.at.server)
			b.errAt(off, w.at.where, w.at.key+".capacity", "capacity %d differs from the %d %s gives %s on line %d: a server has one capacity",
				w.r.Capacity, f.r.Capacity, f.at.where, w.r.Server, line)
		}
	}
}
