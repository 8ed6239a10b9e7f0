// Package deploy holds the fleet's inventory (fleet.yaml) and, in later
// files, DNS publishing, rendering, push and rotation.
//
//	cfg := deploy.DefaultConfig()
//	// cmd/fleet fills cfg from fleet.yaml with cli.Load
//	if err := cfg.Validate(); err != nil { … }
//	for _, e := range cfg.Edges { … e.IPv4, e.IPv6 … }
//
// The package never reads fleet.yaml itself: cmd/fleet does, with the
// strict loader, into the plain Config below.
package deploy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
)

// Config is fleet.yaml (DESIGN.md §8).
type Config struct {
	Name   string `mapstructure:"name"` // FQDN whose A/AAAA set is the edge list
	Zone   string `mapstructure:"zone"`
	TTL    int    `mapstructure:"ttl"` // seconds
	DNS    DNS    `mapstructure:"dns"`
	Origin Origin `mapstructure:"origin"`
	Edges  []Edge `mapstructure:"edges"`
	Deploy Deploy `mapstructure:"deploy"` // how fleet deploy installs an edge (render.go)
}

// DNS is where the A set is published.
type DNS struct {
	Server string `mapstructure:"server"` // host:port of the authoritative server
	TSIG   TSIG   `mapstructure:"tsig"`
}

// TSIG is the key RFC 2136 updates are signed with; give secret or
// secret_file, not both.
type TSIG struct {
	Name       string `mapstructure:"name"`
	Algorithm  string `mapstructure:"algorithm"`
	Secret     string `mapstructure:"secret"`
	SecretFile string `mapstructure:"secret_file"`
}

// Origin is what the firewall protects: the published ports, the external
// interface they arrive on and the address they are published on.
type Origin struct {
	Ports     []int  `mapstructure:"ports"`
	Interface string `mapstructure:"interface"`
	Address   string `mapstructure:"address"`
}

// Edge is one relay of the fleet.
type Edge struct {
	Name    string `mapstructure:"name"`
	IPv4    string `mapstructure:"ipv4"`
	IPv6    string `mapstructure:"ipv6"`
	SSH     string `mapstructure:"ssh"`      // user@host[:port] for deploy push
	HostKey string `mapstructure:"host_key"` // pinned SSH host key (authorized_keys format)
}

// DefaultConfig is fleet.yaml's defaults: TTL 60 s, hmac-sha256, the origin
// front's default port 8636.
func DefaultConfig() Config {
	return Config{
		TTL:    60,
		DNS:    DNS{TSIG: TSIG{Algorithm: "hmac-sha256"}},
		Origin: Origin{Ports: []int{8636}},
		Deploy: DefaultDeploy(),
	}
}

var (
	edgeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	label    = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
	ifName   = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,15}$`)
)

// tsigAlgorithms are the names RFC 8945 and BIND accept.
var tsigAlgorithms = map[string]bool{
	"hmac-sha256": true, "hmac-sha384": true, "hmac-sha512": true, "hmac-sha224": true, "hmac-sha1": true,
}

// Validate reports every bad value, one per line, each naming its key.
// An empty edge list is not an error here: the commands that would lock
// everyone out with it (firewall) refuse it themselves.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.Name != "" && !isDomain(c.Name) {
		bad("name", "%q is not a domain name", c.Name)
	}
	if c.Zone != "" && !isDomain(c.Zone) {
		bad("zone", "%q is not a domain name", c.Zone)
	}
	if c.Name != "" && c.Zone != "" && isDomain(c.Name) && isDomain(c.Zone) && !inZone(c.Name, c.Zone) {
		bad("name", "%q is not inside zone %q", c.Name, c.Zone)
	}
	if c.TTL <= 0 || c.TTL > 1<<31-1 {
		bad("ttl", "%d is not a positive number of seconds", c.TTL)
	}
	if c.DNS.Server != "" {
		if _, port, err := net.SplitHostPort(c.DNS.Server); err != nil || port == "" {
			bad("dns.server", "%q is not host:port", c.DNS.Server)
		}
	}
	if t := c.DNS.TSIG; t.Name != "" || t.Secret != "" || t.SecretFile != "" {
		if t.Name == "" || !isDomain(t.Name) {
			bad("dns.tsig.name", "%q is not a key name", t.Name)
		}
		if !tsigAlgorithms[strings.TrimSuffix(strings.ToLower(t.Algorithm), ".")] {
			bad("dns.tsig.algorithm", "%q is not one of hmac-sha256, hmac-sha384, hmac-sha512, hmac-sha224, hmac-sha1", t.Algorithm)
		}
		switch {
		case t.Secret != "" && t.SecretFile != "":
			bad("dns.tsig", "give secret or secret_file, not both")
		case t.Secret == "" && t.SecretFile == "":
			bad("dns.tsig", "secret or secret_file is required")
		}
	}
	if len(c.Origin.Ports) == 0 {
		bad("origin.ports", "at least one port is required")
	}
	seenPort := map[int]bool{}
	for i, p := range c.Origin.Ports {
		if p < 1 || p > 65535 {
			bad(fmt.Sprintf("origin.ports[%d]", i), "%d is not a TCP port", p)
		} else if seenPort[p] {
			bad(fmt.Sprintf("origin.ports[%d]", i), "%d is listed twice", p)
		}
		seenPort[p] = true
	}
	if c.Origin.Interface != "" && !ifName.MatchString(c.Origin.Interface) {
		bad("origin.interface", "%q is not an interface name", c.Origin.Interface)
	}
	if c.Origin.Address != "" {
		if a, err := netip.ParseAddr(c.Origin.Address); err != nil || a.Zone() != "" {
			bad("origin.address", "%q is not an IP address", c.Origin.Address)
		}
	}
	seen := map[string]bool{}
	for i, e := range c.Edges {
		key := fmt.Sprintf("edges[%d]", i)
		if !edgeName.MatchString(e.Name) {
			bad(key+".name", "%q is not a name (letters, digits, . _ -)", e.Name)
		} else if seen[e.Name] {
			bad(key+".name", "%q is used twice", e.Name)
		}
		seen[e.Name] = true
		if e.IPv4 == "" && e.IPv6 == "" {
			bad(key, "edge %q has neither ipv4 nor ipv6", e.Name)
		}
		if e.IPv4 != "" {
			if a, err := netip.ParseAddr(e.IPv4); err != nil || !a.Is4() {
				bad(key+".ipv4", "%q is not an IPv4 address", e.IPv4)
			}
		}
		if e.IPv6 != "" {
			if a, err := netip.ParseAddr(e.IPv6); err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" {
				bad(key+".ipv6", "%q is not an IPv6 address", e.IPv6)
			}
		}
	}
	return errors.Join(errs...)
}

// Edge returns the edge called name.
func (c Config) Edge(name string) (Edge, bool) {
	for _, e := range c.Edges {
		if e.Name == name {
			return e, true
		}
	}
	return Edge{}, false
}

func isDomain(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !label.MatchString(l) {
			return false
		}
	}
	return true
}

func inZone(name, zone string) bool {
	n := strings.ToLower(strings.TrimSuffix(name, "."))
	z := strings.ToLower(strings.TrimSuffix(zone, "."))
	return n == z || strings.HasSuffix(n, "."+z)
}
