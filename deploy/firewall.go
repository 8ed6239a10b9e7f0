package deploy

import (
	"net/netip"

	"github.com/edgefleet/edgefleet/firewall"
)

// IPTables is the origin host's firewall through the firewall package:
// Base carries the hook chain, ports, pin, owner and flags; the edges are
// convergence's.
type IPTables struct {
	FW   *firewall.Firewall
	Base firewall.Config
}

// Config is Base allowing exactly edges.
func (t IPTables) Config(edges []Edge) firewall.Config {
	c := t.Base
	c.Edges = nil
	for _, e := range edges {
		c.Edges = append(c.Edges, firewall.Edge{Name: e.Name, IPv4: e.IPv4, IPv6: e.IPv6})
	}
	return c
}

// Diff is the rule-level difference from the live rules to the plan for
// edges.
func (t IPTables) Diff(edges []Edge) ([]string, error) {
	_, rep, err := t.check(edges)
	if err != nil {
		return nil, err
	}
	return rep.Diff, nil
}

// check compares the live rules with the plan for edges, once the
// configuration for them is valid.
func (t IPTables) check(edges []Edge) (firewall.Config, firewall.Report, error) {
	c := t.Config(edges)
	if err := c.Validate(); err != nil {
		return c, firewall.Report{}, err
	}
	rep, err := t.FW.Check(c)
	return c, rep, err
}

// Report is the drift from the plan for edges and the live generation
// chains (fleet status).
func (t IPTables) Report(edges []Edge) (firewall.Report, error) {
	_, rep, err := t.check(edges)
	return rep, err
}

// Allow applies a new generation when the live rules differ from the plan
// for edges; undo restores the rules as they were.
func (t IPTables) Allow(edges []Edge) (func() error, error) {
	c, rep, err := t.check(edges)
	if err != nil {
		return nil, err
	}
	if rep.InSync() {
		return nil, nil
	}
	p, err := t.FW.Plan(c)
	if err != nil {
		return nil, err
	}
	saved, err := t.FW.Save()
	if err != nil {
		return nil, err
	}
	if err := t.FW.Apply(p); err != nil {
		return nil, err
	}
	return func() error { return t.FW.Restore(saved) }, nil
}

// Allowed are the sources the live rules let in.
func (t IPTables) Allowed() (map[netip.Addr]bool, error) {
	src, err := t.FW.Sources(t.Base.Chain)
	if err != nil {
		return nil, err
	}
	m := map[netip.Addr]bool{}
	for _, a := range src {
		m[a] = true
	}
	return m, nil
}

// Sources are the sources the live rules let in, with the edge name of
// each rule's comment.
func (t IPTables) Sources() (map[netip.Addr]string, error) { return t.FW.SourceNames(t.Base.Chain) }

var (
	_ Firewall = IPTables{}
	_ Reporter = IPTables{}
)
