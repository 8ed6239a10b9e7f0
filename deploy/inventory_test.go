package deploy

import (
	"net/netip"
	"os"
	"path/filepath"
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
		{name: "unspecified address", edit: func(c *Config) { c.Edges[0].IPv4 = "0.0.0.0" }, wantErr: "edges[0].ipv4: 0.0.0.0 is not the address of one host"},
		{name: "duplicate address", edit: func(c *Config) { c.Edges[1].IPv4 = "203.0.113.10" }, wantErr: `edges[1].ipv4: 203.0.113.10 is already the address of edge "edge-1" (edges[0])`},
		{name: "duplicate ipv6", edit: func(c *Config) { c.Edges[1].IPv6 = "2001:db8:0::10" }, wantErr: `edges[1].ipv6: 2001:db8::10 is already the address of edge "edge-1" (edges[0])`},
		{name: "secret not base64", edit: func(c *Config) { c.DNS.TSIG.Secret = "not base64!" }, wantErr: "dns.tsig.secret: the secret is not base64"},
		{name: "missing secret file", edit: func(c *Config) {
			c.DNS.TSIG = TSIG{Name: "k", Algorithm: "hmac-sha256", SecretFile: "/nonexistent/fleet.key"}
		},
			wantErr: "dns.tsig.secret_file: open /nonexistent/fleet.key: no such file or directory"},
		{name: "bad metrics", edit: func(c *Config) { c.Edges[0].Metrics = "9101" }, wantErr: `edges[0].metrics: "9101" is not host:port or an http(s) URL`},
		{name: "metrics host:port", edit: func(c *Config) { c.Edges[0].Metrics = "203.0.113.10:9101" }},
		{name: "metrics URL", edit: func(c *Config) { c.Edges[0].Metrics = "https://edge-1.example.net/metrics" }},
		{name: "probe cert without key", edit: func(c *Config) { c.Probe.Cert = "agent.pem" }, wantErr: "probe: give both cert and key, or neither"},
		{name: "zero budget", edit: func(c *Config) { c.Probe.Budget = 0 }, wantErr: "probe.budget: 0s is not a positive duration"},
		{name: "zero drain timeout", edit: func(c *Config) { c.DrainTimeout = 0 }, wantErr: "drain_timeout: 0s is not a positive duration"},
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

func TestValidateDNS(t *testing.T) {
	c := validConfig()
	if err := c.ValidateDNS(); err != nil {
		t.Fatal(err)
	}
	c.DNS.Server = ""
	if err := c.ValidateDNS(); err == nil || !strings.Contains(err.Error(), "dns.server: required to publish the edges") {
		t.Fatalf("ValidateDNS() = %v", err)
	}
}

// TestLoadSecretFile: secret_file holds either the bare secret or the key
// clause tsig-keygen prints; an empty or unreadable file names the key.
func TestLoadSecretFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, content, want, wantErr string }{
		{name: "bare", content: "c2VjcmV0\n", want: "c2VjcmV0"},
		{name: "tsig-keygen", content: "key \"fleet-key\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0LXR3bw==\";\n};\n", want: "c2VjcmV0LXR3bw=="},
		{name: "empty", content: "\n", wantErr: "is empty"},
		{name: "garbage", content: "key {", wantErr: "dns.tsig.secret_file: the secret is not base64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			os.WriteFile(p, []byte(tc.content), 0o600)
			got, err := TSIG{SecretFile: p}.LoadSecret()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("LoadSecret() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestCheckEdgeAddrs: addresses that can never be an edge are refused,
// each naming its key and edge; loopback only with allowLoopback.
func TestCheckEdgeAddrs(t *testing.T) {
	own := []netip.Addr{netip.MustParseAddr("10.77.0.1")}
	for _, tc := range []struct {
		ipv4, ipv6    string
		allowLoopback bool
		want          string
	}{
		{ipv4: "203.0.113.10", want: ""},
		{ipv4: "127.0.0.2", want: `edges[0].ipv4: 127.0.0.2 (edge "e1") is a loopback address`},
		{ipv4: "127.0.0.2", allowLoopback: true, want: ""},
		{ipv6: "::1", want: `edges[0].ipv6: ::1 (edge "e1") is a loopback address`},
		{ipv4: "0.0.0.0", want: "is not the address of one host"},
		{ipv4: "255.255.255.255", want: "is not the address of one host"},
		{ipv4: "224.0.0.1", want: "is not the address of one host"},
		{ipv6: "ff02::1", want: "is not the address of one host"},
		{ipv4: "192.0.2.2", want: `edges[0].ipv4: 192.0.2.2 (edge "e1") is an address of the origin`}, // origin.address
		{ipv4: "10.77.0.1", want: "is an address of the origin"},                                      // the host's own
	} {
		c := validConfig()
		c.Edges = []Edge{{Name: "e1", IPv4: tc.ipv4, IPv6: tc.ipv6}}
		err := c.CheckEdgeAddrs(tc.allowLoopback, own)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s %s (loopback %v): err = %v, want %q", tc.ipv4, tc.ipv6, tc.allowLoopback, err, tc.want)
		}
	}
}
