package deploy

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"

	"github.com/edgefleet/edgefleet/firewall"
)

// HostFirewall is one origin host's firewall, by the host's name.
type HostFirewall struct {
	Name string
	Firewall
}

// Pool is the firewalls of every origin host as the one Firewall
// convergence sees: each step that changes the rules changes them on every
// host before it returns, so the safe order holds for the pool (every
// host allows an edge before DNS adds it; every host drops it only after
// its wait). A host that cannot be read stops the change before anything
// is changed anywhere: Allow reads every host first. One host is the
// Firewall it holds, and says exactly what that one says.
type Pool []HostFirewall

// errf is err on host h, named when the pool has more than one host.
func (p Pool) errf(h HostFirewall, err error) error {
	if len(p) == 1 {
		return err
	}
	return fmt.Errorf("origin %s: %w", h.Name, err)
}

// Diff is every host's difference, each line after its host's name
// ("par-b: +-A EDGEFLEET …") when the pool has more than one host.
func (p Pool) Diff(edges []Edge) ([]string, error) {
	out, _, err := p.diff(edges)
	return out, err
}

// diff is Diff, and the hosts whose rules differ (those a change to
// exactly edges touches), in the pool's order.
func (p Pool) diff(edges []Edge) (out, hosts []string, err error) {
	for _, h := range p {
		d, err := h.Diff(edges)
		if err != nil {
			return nil, nil, p.errf(h, err)
		}
		if len(d) > 0 {
			hosts = append(hosts, h.Name)
		}
		for _, l := range d {
			if len(p) > 1 {
				l = h.Name + ": " + l
			}
			out = append(out, l)
		}
	}
	return out, hosts, nil
}

// Allow makes every host let in exactly edges. Every host is read first:
// one that cannot be (unreachable, its rules unreadable, the plan refused)
// fails the call with nothing changed on any host. A host whose change
// fails then has the hosts changed before it put back as they were. The
// undo puts back every host that changed, the last changed first.
func (p Pool) Allow(edges []Edge) (func() error, error) {
	var todo []HostFirewall
	for _, h := range p {
		d, err := h.Diff(edges)
		if err != nil {
			return nil, fmt.Errorf("%w: no origin host changed", p.errf(h, err))
		}
		if len(d) > 0 {
			todo = append(todo, h)
		}
	}
	var undos []func() error
	var names []string
	undo := func() error {
		var errs []error
		for i := len(undos) - 1; i >= 0; i-- {
			if err := undos[i](); err != nil {
				errs = append(errs, fmt.Errorf("restore origin %s: %w", names[i], err))
			}
		}
		return errors.Join(errs...)
	}
	for _, h := range todo {
		u, err := h.Allow(edges)
		if err != nil {
			err = p.errf(h, err)
			if len(undos) == 0 {
				return nil, err
			}
			if uerr := undo(); uerr != nil {
				return nil, fmt.Errorf("%w; %w", err, uerr)
			}
			return nil, fmt.Errorf("%w: the origin hosts changed before it are restored", err)
		}
		if u != nil {
			undos = append(undos, u)
			names = append(names, h.Name)
		}
	}
	if len(undos) == 0 {
		return nil, nil
	}
	return undo, nil
}

// Allowed are the sources any host lets in: an address one host still
// allows is still allowed (it leaves by the safe order like any other).
func (p Pool) Allowed() (map[netip.Addr]bool, error) {
	out := map[netip.Addr]bool{}
	for _, h := range p {
		m, err := h.Allowed()
		if err != nil {
			return nil, p.errf(h, err)
		}
		maps.Copy(out, m)
	}
	return out, nil
}

// Sources are Allowed with the edge name of each rule, the first host's
// name where the hosts' comments differ.
func (p Pool) Sources() (map[netip.Addr]string, error) {
	out := map[netip.Addr]string{}
	for _, h := range p {
		m, err := h.Sources()
		if err != nil {
			return nil, p.errf(h, err)
		}
		for a, n := range m {
			if _, ok := out[a]; !ok {
				out[a] = n
			}
		}
	}
	return out, nil
}

// HostStatus is one origin host's firewall at a glance (fleet status):
// its live generation chains and its drift, the rule-level difference
// from the rules that let in exactly the allowed set.
type HostStatus struct {
	Name   string   `json:"name"`
	Chains []string `json:"chains"` // "IPv4: EDGEFLEET-3"
	Drift  []string `json:"drift"`  // empty: in sync
	Error  string   `json:"error,omitempty"`
}

// FirewallSet is the edges the firewall lets in by the one allowed-set
// rule, as far as the state knows it: the inventory's but the withdrawn
// (Allowed), then the state's draining edges (fleet status's drift).
func FirewallSet(cfg Config, st *State) []Edge {
	out := Allowed(cfg, st)
	for _, name := range st.Sorted() {
		if s := st.Edges[name]; s.State == StateDraining {
			out = append(out, s.Edge(name))
		}
	}
	return out
}

// Reporter is what a firewall that knows its generation chains
// (IPTables) offers fleet status: the drift and the chains in one read.
type Reporter interface {
	Report(edges []Edge) (firewall.Report, error)
}

// Hosts reports every host's generation chains and drift against the
// rules for edges (the allowed set).
func (p Pool) Hosts(edges []Edge) []HostStatus {
	out := make([]HostStatus, 0, len(p))
	for _, h := range p {
		s := HostStatus{Name: h.Name, Chains: []string{}, Drift: []string{}}
		var err error
		if r, ok := h.Firewall.(Reporter); ok {
			var rep firewall.Report
			if rep, err = r.Report(edges); err == nil {
				s.Chains, s.Drift = append(s.Chains, rep.Chains...), append(s.Drift, rep.Diff...)
			}
		} else {
			var d []string
			if d, err = h.Diff(edges); err == nil {
				s.Drift = append(s.Drift, d...)
			}
		}
		if err != nil {
			s.Error = err.Error()
		}
		out = append(out, s)
	}
	return out
}

var _ Firewall = Pool{}
