// Package firewall keeps an origin's ports open to the fleet's edges only.
//
// Docker publishes container ports with DNAT and FORWARD rules that never
// pass through the host's INPUT chain, so the rules live in DOCKER-USER,
// the chain Docker itself consults (or in INPUT on a host without Docker).
// They sit in an own chain EDGEFLEET-<generation>, jumped from position 1
// of the hook chain and swapped atomically by one replace of that jump.
//
//	fw, err := firewall.Open("auto", firewall.DockerUser) // the backend dockerd uses
//	plan, err := fw.Plan(cfg)                             // exact rules, next generation
//	err = fw.Apply(plan)                                  // build, swap, delete the old chain
//	report, err := fw.Check(cfg)                          // report.Diff is empty when in sync
//	snap, err := fw.Save()                                // the live rules, for Restore to put back
//	err = fw.Watch(ctx, firewall.Static(cfg), 5*time.Second, log)
//
// NewPlan is the pure half (no iptables involved): the golden tests and
// `fleet firewall plan` print what it returns.
package firewall

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
)

// Hook chains the rule set can be jumped from.
const (
	DockerUser = "DOCKER-USER" // published container ports (FORWARD)
	Input      = "INPUT"       // the host's own listening ports
)

// ChainPrefix names the generation chains: EDGEFLEET-1, EDGEFLEET-2, …
// A Firewall only ever reads, replaces or deletes chains with its prefix
// and the jumps to them.
const ChainPrefix = "EDGEFLEET-"

// Config is what the rule set is built from; cmd/fleet fills it from
// fleet.yaml (origin and edges) and flags.
type Config struct {
	// Chain is the hook chain: DockerUser (default) or Input.
	Chain string
	// Ports are the origin's published ports (the original destination
	// port before Docker's DNAT).
	Ports []int
	// Interface is the external interface the edges' connections arrive
	// on. It, or Address, pins the rules to inbound traffic: without a pin
	// the origin's own outbound connections to an edge on the same port
	// number are dropped too (DOCKER-USER sees both directions).
	Interface string
	// Address is the published address (the original destination before
	// DNAT), the other possible pin.
	Address string
	// Edges are the only sources let in.
	Edges []Edge
	// Force applies despite a refusal: bad addresses are skipped, an
	// empty edge list or a missing pin is accepted, a family whose hook
	// chain is missing is skipped.
	Force bool
	// CreateChain creates a missing hook chain instead of refusing.
	CreateChain bool
	// Owner names the inventory the rules belong to (its DNS name); it is
	// written into the jump's comment. Rules of another owner are never
	// replaced or removed (unless Force): one host, one inventory's rules.
	// Rules without an owner are anyone's.
	Owner string
}

// Edge is one allowed source; either address may be empty.
type Edge struct {
	Name string
	IPv4 string
	IPv6 string
}

// DefaultConfig hooks into DOCKER-USER.
func DefaultConfig() Config { return Config{Chain: DockerUser} }

var (
	safeName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)
	ifName   = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,15}$`)
	// ownerName is a domain name, as the inventory's name is.
	ownerName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,253}$`)
)

// IsInterfaceName reports whether s can be a Linux network interface name
// (at most 15 characters) as `iptables -i` takes it.
func IsInterfaceName(s string) bool { return ifName.MatchString(s) }

// Validate reports what cannot be turned into rules even with Force.
func (c Config) Validate() error {
	var errs []error
	if c.Chain != DockerUser && c.Chain != Input {
		errs = append(errs, fmt.Errorf("chain: %q is not %s or %s", c.Chain, DockerUser, Input))
	}
	if len(c.Ports) == 0 {
		errs = append(errs, errors.New("origin.ports: at least one port is required"))
	}
	for _, p := range c.Ports {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("origin.ports: %d is not a TCP port", p))
		}
	}
	if c.Interface != "" && !IsInterfaceName(c.Interface) {
		errs = append(errs, fmt.Errorf("origin.interface: %q is not an interface name", c.Interface))
	}
	if c.Address != "" {
		if _, err := parseAddr(c.Address); err != nil {
			errs = append(errs, fmt.Errorf("origin.address: %w", err))
		}
	}
	if c.Owner != "" && !ownerName.MatchString(c.Owner) {
		errs = append(errs, fmt.Errorf("owner %q: use letters, digits, . _ - (it goes into a rule comment)", c.Owner))
	}
	for _, e := range c.Edges {
		if !safeName.MatchString(e.Name) {
			errs = append(errs, fmt.Errorf("edge name %q: use letters, digits, . _ - (it goes into a rule comment)", e.Name))
		}
	}
	return errors.Join(errs...)
}

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil || a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	case a.Is4In6():
		return netip.Addr{}, fmt.Errorf("%q is IPv4-mapped: write it as %s", s, a.Unmap())
	case a.IsUnspecified():
		return netip.Addr{}, fmt.Errorf("%q is the unspecified address, not one host (leave origin.address empty for a port published on every address)", s)
	}
	return a, nil
}
