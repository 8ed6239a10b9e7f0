package dlp

import (
	"fmt"
	"slices"
	"sync"
)

// Router evaluates the rules of one LdapProxy. It is shared by all client
// connections of a core: the round-robin pointers live here.
type Router struct {
	f *File
	p *Proxy
	h *Health

	mu   sync.Mutex
	next map[*Rule]int // round-robin pointer: index in Forward of the next start
}

// NewRouter returns a Router over p's rules, using h for the OFFLINE state.
func NewRouter(f *File, p *Proxy, h *Health) *Router {
	return &Router{f: f, p: p, h: h, next: map[*Rule]int{}}
}

// Selection is the outcome of rule evaluation.
type Selection struct {
	// Rule is the matching rule; nil when LdapProxy.default applies.
	Rule *Rule
	// Candidates are the servers in the order to try: the round-robin start
	// (the first server when the rule does not load-balance), then walking
	// forward through the list, wrapping, with OFFLINE servers left out.
	// When the rule has failover 0 it holds just the first of them. It is
	// empty when every server is OFFLINE (the operation fails with 52: the
	// seed leaves no way around an all-OFFLINE list until the retry time
	// has passed), and nil for a balance(LB) rule, whose servers the
	// LoadBalancer chooses per operation.
	Candidates []string
}

// SelectUser chooses the targets of a connection's identity: the first
// UserRouting rule, in LdapProxy.rules order, whose condition matches; else
// LdapProxy.default (tried in its order, with failover); else an error
// naming the user, which the core answers with unavailable (52).
//
// Each call is one selection: a load-balancing rule's pointer advances by
// one, whether or not the chosen server is OFFLINE or fails later.
func (r *Router) SelectUser(c *Ctx) (*Selection, error) {
	cc := normalized(c)
	if r.p == nil {
		return nil, fmt.Errorf("no LdapProxy to route user %q", who(cc.User))
	}
	if rule := r.match(UserRouting, &cc); rule != nil {
		return r.selection(rule), nil
	}
	if len(r.p.Default) > 0 {
		return &Selection{Candidates: r.candidates(r.p.Default, 0, true)}, nil
	}
	return nil, fmt.Errorf("no rule of LdapProxy %q matches user %q and it has no default servers", r.p.Name, who(cc.User))
}

// SelectOperation chooses the targets of one operation by the first
// matching OperationRouting rule; false when none matches (the
// connection's user target applies).
func (r *Router) SelectOperation(c *Ctx) (*Selection, bool) {
	if r.p == nil || !slices.ContainsFunc(r.p.Rules, func(rule *Rule) bool { return rule.Type == OperationRouting }) {
		return nil, false // most proxies have none: no normalising, no allocation per operation
	}
	cc := normalized(c)
	if rule := r.match(OperationRouting, &cc); rule != nil {
		return r.selection(rule), true
	}
	return nil, false
}

func (r *Router) match(typ string, c *Ctx) *Rule {
	for _, rule := range r.p.Rules {
		if rule.Type == typ && rule.Condition.Match(c) {
			return rule
		}
	}
	return nil
}

// selection applies round robin, then the OFFLINE filter. Failover is not
// the Router's business beyond the order of Candidates: the core walks
// forward from the server that failed, which never touches the pointer —
// hence the seed's L1, L2, L1 (failover from L3), L1.
func (r *Router) selection(rule *Rule) *Selection {
	if rule.Balance != "" {
		return &Selection{Rule: rule}
	}
	start := 0
	if rule.LoadBalance && len(rule.Forward) > 0 {
		r.mu.Lock()
		start = r.next[rule] % len(rule.Forward)
		r.next[rule] = (start + 1) % len(rule.Forward)
		r.mu.Unlock()
	}
	return &Selection{Rule: rule, Candidates: r.candidates(rule.Forward, start, rule.Failover)}
}

func (r *Router) candidates(list []string, start int, failover bool) []string {
	out := make([]string, 0, len(list))
	for i := range list {
		s := list[(start+i)%len(list)]
		if r.h.Offline(s) {
			continue
		}
		out = append(out, s)
		if !failover {
			break
		}
	}
	return out
}

func normalized(c *Ctx) Ctx {
	return Ctx{User: NormalizeDN(c.User), Op: c.Op, BaseObject: NormalizeDN(c.BaseObject)}
}

func who(user string) string {
	if user == "" {
		return "anonymous"
	}
	return user
}
