// Package dlp reads the DLP configuration file (ldap_proxy.json) and makes
// the routing decisions of the LDAP core: which rule applies to a user or an
// operation, and in which order its servers are tried, with round robin,
// failover and the OFFLINE state shared by all connections; and, for a
// balance(LB) rule, which server each operation goes to (the LoadBalancer
// algorithms of seed 003, over the servers' saturation).
//
//	f, err := dlp.ParseFile("ldap_proxy.json")  // err is an ErrorList, one line per error
//	p := f.Proxy(coreName)                       // nil → plain mode
//	h := dlp.NewHealth(f.Defaults.OfflineRetryTimeout, time.Now)
//	rt := dlp.NewRouter(f, p, h)
//	sel, err := rt.SelectUser(&dlp.Ctx{User: dlp.NormalizeDN(bindDN), Op: "bind"})
//	for _, s := range sel.Candidates { /* dial f.Servers[s].Addr(); h.Fail(s) or h.Succeed(s) */ }
//
//	load := dlp.NewLoad(f, time.Now)                  // load.Begin(s) / load.End(s) around each operation
//	bs := dlp.NewBalancers(f, h, load)
//	order := bs.Select(rule.Balance, dlp.Op{Type: "search", FilterAttrs: attrs}) // for sel.Rule.Balance != ""
//
// The selection semantics follow the DirX DLP documentation (seed 000) to
// the letter; docs/dlp-file.md describes the file format, docs/balancers.md
// the LoadBalancer objects.
package dlp

import (
	"net"
	"strconv"
	"time"
)

// File is a parsed DLP configuration file.
type File struct {
	Path        string
	Defaults    Defaults
	Servers     map[string]*Server
	ServerOrder []string // server names in file order
	Proxies     []*Proxy
	Rules       map[string]*Rule
	RuleOrder   []string // rule names in file order
	Balancers   map[string]*Balancer
}

// Defaults is the Defaults object, with the documented defaults filled in.
type Defaults struct {
	ConnectTimeout      time.Duration // 3s; 0 is rejected
	OfflineRetryTimeout time.Duration // 60s
	MonitorInterval     time.Duration // 10s
	JSONCodeSet         int           // 1 = UTF-8, 0 = Latin-1 (converted on load)
	Tracing             int           // 0..3
}

// DefaultDefaults is what a file without a Defaults object gets.
func DefaultDefaults() Defaults {
	return Defaults{
		ConnectTimeout:      3 * time.Second,
		OfflineRetryTimeout: 60 * time.Second,
		MonitorInterval:     10 * time.Second,
		JSONCodeSet:         1,
	}
}

// Server is an LdapServer object: one backend directory server.
type Server struct {
	Name string
	Host string
	Port int  // 389
	SSL  bool // LDAPS toward the server; needs proxy mode 2 (checked by the core)

	// SSLAt is where "ssl" is written, so that the core's proxy-mode check
	// reports it like any other error of the file.
	SSLAt Pos
}

// Pos is a 1-based line and column in a DLP file.
type Pos struct{ Line, Col int }

// Addr is host:port for net.Dial.
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Rule types.
const (
	UserRouting      = "UserRouting"
	OperationRouting = "OperationRouting"
)

// Rule is a ProxyRule object.
type Rule struct {
	Type          string // UserRouting or OperationRouting
	Name          string
	Condition     Cond
	ConditionText string   // as written (after Latin-1 conversion)
	Forward       []string // forwardto(S1,S2,…): server names, in order
	Balance       string   // balance(LB): a LoadBalancer name; Forward is then empty
	LoadBalance   bool     // round robin over Forward; default 0 for an exact-DN rule, 1 for other UserRouting rules, 0 for OperationRouting
	Failover      bool     // try the next server when one fails; default 1
	KeepConn      bool     // OperationRouting only: after a success the connection's target switches to this rule's
}

// Proxy is an LdapProxy object: the rule set of one core instance, chosen
// by core.name.
type Proxy struct {
	Name    string
	Rules   []*Rule  // resolved, in evaluation order
	Default []string // servers used when no UserRouting rule matches; empty → the operation fails (52)
}

// Balancer is a LoadBalancer object (docs/balancers.md), checked by the parser
// (balancerfile.go); Balancers (balance.go) runs it.
type Balancer struct {
	Name       string
	Algorithm  string // failover, optimal, proportional, saturation or searchfilter
	Routes     []*Route
	Switchback bool    // failover: return to the preferred route once it is healthy again
	Precision  float64 // optimal: percentage points another route must be lower by (5)
	Threshold  float64 // saturation: percent at which a route counts as saturated
	Alert      float64 // saturation: percent at which a warning is logged and counted; 0: none
}

// Route is one route of a LoadBalancer: a server and what the algorithm
// needs to know about it.
type Route struct {
	Server string
	// Priority and Weight are by operation type (bind, search, …) with
	// "default" for the types not listed; a plain number in the file is
	// stored as "default".
	Priority map[string]int // lower is preferred
	Weight   map[string]int // proportional; 0 = never
	Capacity int            // operations in flight that make 100 % saturation (64)
	// Allowed and Prohibited are attribute names as CanonicalAttr gives
	// them (searchfilter).
	Allowed, Prohibited []string
}

// Proxy returns the LdapProxy object with that name, nil when there is none
// (the core then runs in plain mode).
func (f *File) Proxy(name string) *Proxy {
	for _, p := range f.Proxies {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// PriorityFor is the route's priority for an operation type: the type's
// own, else "default", else after every listed priority.
func (r *Route) PriorityFor(op string) int {
	if p, ok := r.Priority[op]; ok {
		return p
	}
	if p, ok := r.Priority["default"]; ok {
		return p
	}
	return maxRouteValue + 1
}

// WeightFor is the route's weight for an operation type: the type's own,
// else "default", else 1 (types no route lists are shared equally).
func (r *Route) WeightFor(op string) int {
	if w, ok := r.Weight[op]; ok {
		return w
	}
	if w, ok := r.Weight["default"]; ok {
		return w
	}
	return 1
}

// Capacity is the capacity of server's routes (they agree; DefaultCapacity
// when no route names it).
func (f *File) Capacity(server string) int {
	for _, lb := range f.Balancers {
		for _, r := range lb.Routes {
			if r.Server == server {
				return r.Capacity
			}
		}
	}
	return DefaultCapacity
}
