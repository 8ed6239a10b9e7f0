package deploy

import (
	"strings"
	"testing"
)

func validConfig() Config {
	c := DefaultConfig()
	c.Name = "ldap.example.net"
	c.Zone = "example.net"
	c.DNS.Server = "192.0.2.53:53"
	c.DNS.TSIG = TSIG{Name: "fleet-key", Algorithm: "hmac-sha256", Secret: "c2VjcmV0"}
	c.Origin = Origin{Ports: []int{8636}, Interface: "eth0", Address: "192.0.2.2"}
	c.Edges = []Edge{
		{Name: "edge-1", IPv4: "203.0.113.10", IPv6: "2001:db8::10"},
		{Name: "edge-2", IPv4: "203.0.113.11"},
	}
	return c
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*Config)
		wantErr string // "" means valid
	}{
		{name: "valid", edit: func(*Config) {}},
		{name: "defaults alone", edit: func(c *Config) { *c = DefaultConfig() }},
		{name: "no edges is not an inventory error", edit: func(c *Config) { c.Edges = nil }},
		{name: "bad name", edit: func(c *Config) { c.Name = "ldap..example" }, wantErr: `name: "ldap..example" is not a domain name`},
		{name: "name outside zone", edit: func(c *Config) { c.Name = "ldap.example.org" }, wantErr: `name: "ldap.example.org" is not inside zone "example.net"`},
		{name: "zero ttl", edit: func(c *Config) { c.TTL = 0 }, wantErr: "ttl: 0 is not a positive number of seconds"},
		{name: "server without port", edit: func(c *Config) { c.DNS.Server = "192.0.2.53" }, wantErr: `dns.server: "192.0.2.53" is not host:port`},
		{name: "secret and file", edit: func(c *Config) { c.DNS.TSIG.SecretFile = "k" }, wantErr: "dns.tsig: give secret or secret_file, not both"},
		{name: "no secret", edit: func(c *Config) { c.DNS.TSIG.Secret = "" }, wantErr: "dns.tsig: secret or secret_file is required"},
		{name: "bad algorithm", edit: func(c *Config) { c.DNS.TSIG.Algorithm = "md5" }, wantErr: `dns.tsig.algorithm: "md5"`},
		{name: "no ports", edit: func(c *Config) { c.Origin.Ports = nil }, wantErr: "origin.ports: at least one port is required"},
		{name: "port out of range", edit: func(c *Config) { c.Origin.Ports = []int{70000} }, wantErr: "origin.ports[0]: 70000 is not a TCP port"},
		{name: "port twice", edit: func(c *Config) { c.Origin.Ports = []int{636, 636} }, wantErr: "origin.ports[1]: 636 is listed twice"},
		{name: "bad interface", edit: func(c *Config) { c.Origin.Interface = "a very long interface" }, wantErr: `origin.interface: "a very long interface" is not an interface name`},
		{name: "bad origin address", edit: func(c *Config) { c.Origin.Address = "192.0.2" }, wantErr: `origin.address: "192.0.2" is not an IP address`},
		{name: "bad ipv4", edit: func(c *Config) { c.Edges[0].IPv4 = "203.0.113.300" }, wantErr: `edges[0].ipv4: "203.0.113.300" is not an IPv4 address`},
		{name: "ipv6 in ipv4", edit: func(c *Config) { c.Edges[0].IPv4 = "2001:db8::1" }, wantErr: `edges[0].ipv4: "2001:db8::1" is not an IPv4 address`},
		{name: "ipv4 in ipv6", edit: func(c *Config) { c.Edges[1].IPv6 = "203.0.113.11" }, wantErr: `edges[1].ipv6: "203.0.113.11" is not an IPv6 address`},
		{name: "prefix is not an address", edit: func(c *Config) { c.Edges[0].IPv4 = "203.0.113.0/24" }, wantErr: `edges[0].ipv4: "203.0.113.0/24" is not an IPv4 address`},
		{name: "no address", edit: func(c *Config) { c.Edges[1].IPv4 = "" }, wantErr: `edges[1]: edge "edge-2" has neither ipv4 nor ipv6`},
		{name: "duplicate edge", edit: func(c *Config) { c.Edges[1].Name = "edge-1" }, wantErr: `edges[1].name: "edge-1" is used twice`},
		{name: "bad edge name", edit: func(c *Config) { c.Edges[0].Name = "edge 1" }, wantErr: `edges[0].name: "edge 1" is not a name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.TTL != 60 || c.DNS.TSIG.Algorithm != "hmac-sha256" || len(c.Origin.Ports) != 1 || c.Origin.Ports[0] != 8636 {
		t.Fatalf("DefaultConfig() = %+v", c)
	}
	if _, ok := validConfig().Edge("edge-2"); !ok {
		t.Fatal("Edge(edge-2) not found")
	}
}
