package deploy

import (
	"net/netip"

	"github.com/edgefleet/edgefleet/firewall"
)

// IPTables is the origin host's firewall through the firewall package:
// Base carries the hook chain, ports, pin and flags; the edges are
// convergence's.
type IPTables struct {
	FW   *firewall.Firewall
	Base firewall.Config
}

// Allow applies a new generation when the live rules differ from the plan
// for edges.
func (t IPTables) Allow(edges []Edge) (bool, error) {
	c := t.Base
	c.Edges = nil
	for _, e := range edges {
		c.Edges = append(c.Edges, firewall.Edge{Name: e.Name, IPv4: e.IPv4, IPv6: e.IPv6})
	}
	if err := c.Validate(); err != nil {
		return false, err
	}
	rep, err := t.FW.Check(c)
	if err != nil {
		return false, err
	}
	if rep.InSync() {
		return false, nil
	}
	p, err := t.FW.Plan(c)
	if err != nil {
		return false, err
	}
	return true, t.FW.Apply(p)
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

var _ Firewall = IPTables{}
