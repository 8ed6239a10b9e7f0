package origin

import (
	"net/netip"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/proxyheader"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		err  string
	}{
		{"defaults", func(c *Config) {}, ""},
		{"cidrs and addresses", func(c *Config) { c.TrustedEdges = []string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::1"} }, ""},
		{"reject with edges", func(c *Config) { c.TrustedEdges = []string{"10.0.0.0/8"}; c.Untrusted = UntrustedReject }, ""},
		{"no listen", func(c *Config) { c.Listen = nil }, "front.listen: at least one address is required"},
		{"bad listen", func(c *Config) { c.Listen = []string{"8636"} }, `front.listen: "8636" is not host:port`},
		{"bad inner", func(c *Config) { c.Inner = "localhost" }, `front.inner: "localhost" is not host:port`},
		{"inner without host", func(c *Config) { c.Inner = ":1636" }, `front.inner: ":1636" is not host:port`},
		{"inner is the listener", func(c *Config) { c.Listen = []string{"127.0.0.1:8636"}; c.Inner = "127.0.0.1:8636" }, `front.inner: "127.0.0.1:8636" is the front's own listen address "127.0.0.1:8636": every connection would be forwarded to itself`},
		{"inner on a wildcard listener", func(c *Config) { c.Inner = "127.0.0.1:8636" }, `front.inner: "127.0.0.1:8636" is the front's own listen address ":8636": every connection would be forwarded to itself`},
		{"inner is localhost", func(c *Config) { c.Listen = []string{"127.0.0.1:8636"}; c.Inner = "localhost:8636" }, `front.inner: "localhost:8636" is the front's own listen address "127.0.0.1:8636": every connection would be forwarded to itself`},
		{"inner is v4-mapped", func(c *Config) { c.Listen = []string{"127.0.0.1:8636"}; c.Inner = "[::ffff:127.0.0.1]:8636" }, `front.inner: "[::ffff:127.0.0.1]:8636" is the front's own listen address "127.0.0.1:8636": every connection would be forwarded to itself`},
		{"inner is 0.0.0.0", func(c *Config) { c.Listen = []string{"127.0.0.1:8636"}; c.Inner = "0.0.0.0:8636" }, `front.inner: "0.0.0.0:8636" is the front's own listen address "127.0.0.1:8636": every connection would be forwarded to itself`},
		{"inner port too high", func(c *Config) { c.Inner = "127.0.0.1:99999" }, `front.inner: "127.0.0.1:99999": port "99999" is outside 1-65535`},
		{"inner port negative", func(c *Config) { c.Inner = "127.0.0.1:-1" }, `front.inner: "127.0.0.1:-1": port "-1" is outside 1-65535`},
		{"inner port zero", func(c *Config) { c.Inner = "127.0.0.1:0" }, `front.inner: "127.0.0.1:0": port "0" is outside 1-65535`},
		{"inner port by name", func(c *Config) { c.Inner = "127.0.0.1:ldaps" }, `front.inner: "127.0.0.1:ldaps": port "ldaps" is outside 1-65535`},
		{"listen port too high", func(c *Config) { c.Listen = []string{":99999"} }, `front.listen: ":99999": port "99999" is outside 1-65535`},
		{"link-local edges", func(c *Config) { c.TrustedEdges = []string{"fe80::/10"} }, `front.trusted_edges: "fe80::/10" is link-local: a link-local peer is never trusted (a prefix cannot name its link)`},
		{"link-local edge", func(c *Config) { c.TrustedEdges = []string{"fe80::7"} }, `front.trusted_edges: "fe80::7" is link-local: a link-local peer is never trusted (a prefix cannot name its link)`},
		{"prefix around link-local", func(c *Config) { c.TrustedEdges = []string{"::/0"} }, ""},
		{"max_conns zero", func(c *Config) { c.MaxConns = 0 }, `front.max_conns: 0 must be positive`},
		{"inner on another address, same port", func(c *Config) { c.Listen = []string{"192.0.2.1:8636"}; c.Inner = "127.0.0.1:8636" }, ""},
		{"bad cidr", func(c *Config) { c.TrustedEdges = []string{"10.0.0.0/33"} }, `front.trusted_edges: "10.0.0.0/33" is not a CIDR or an IP address`},
		{"mapped prefix shorter than the mapping", func(c *Config) { c.TrustedEdges = []string{"::ffff:127.0.0.0/8"} }, `front.trusted_edges: "::ffff:127.0.0.0/8" is not a CIDR or an IP address (an IPv4-mapped prefix needs at least /96)`},
		{"hostname edge", func(c *Config) { c.TrustedEdges = []string{"edge1.example.net"} }, `front.trusted_edges: "edge1.example.net" is not a CIDR or an IP address`},
		{"bad untrusted", func(c *Config) { c.Untrusted = "drop" }, `front.untrusted: "drop" is not passthrough or reject`},
		{"reject without edges", func(c *Config) { c.Untrusted = UntrustedReject }, "front.untrusted: reject with an empty trusted_edges would close every connection"},
		{"zero timeout", func(c *Config) { c.HeaderTimeout = 0 }, "front.header_timeout: 0s must be positive"},
		{"negative timeout", func(c *Config) { c.HeaderTimeout = -time.Second }, "front.header_timeout: -1s must be positive"},
		{"per_edge off", func(c *Config) { c.PerEdge = PerEdge{Rate: "0"} }, ""},
		{"per_edge rate per hour", func(c *Config) { c.PerEdge.Rate = "36000/h" }, ""},
		{"per_edge conns negative", func(c *Config) { c.PerEdge.Conns = -1 }, "front.per_edge.conns: -1 is negative (0: no cap)"},
		{"per_edge rate without unit", func(c *Config) { c.PerEdge.Rate = "1000" }, `front.per_edge.rate: rate "1000": want N/s, N/m or N/h`},
		{"per_edge rate bad unit", func(c *Config) { c.PerEdge.Rate = "10/d" }, `front.per_edge.rate: rate "10/d": unit "d" is not s, m or h`},
		{"per_edge rate negative", func(c *Config) { c.PerEdge.Rate = "-5/s" }, `front.per_edge.rate: rate "-5/s": "-5" is not a number of events between 0 and 1e9`},
		{"per_edge burst zero", func(c *Config) { c.PerEdge.Burst = 0 }, "front.per_edge.burst: 0 must be at least 1 with a rate"},
		{"per_edge burst negative", func(c *Config) { c.PerEdge = PerEdge{Rate: "0", Burst: -1} }, "front.per_edge.burst: -1 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			err := c.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.err {
				t.Fatalf("Validate() = %q, want %q", got, tt.err)
			}
		})
	}
}

func TestTrusts(t *testing.T) {
	c := DefaultConfig()
	c.TrustedEdges = []string{"127.0.0.2", "10.1.0.0/16", "2001:db8:1::/48", "::ffff:192.0.2.0/120"}
	p, err := c.parse()
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{
		"127.0.0.2:1000":          true,
		"127.0.0.3:1000":          false,
		"10.1.200.3:5":            true,
		"10.2.0.1:5":              false,
		"[::ffff:127.0.0.2]:1000": true, // a dual-stack listener's view of an IPv4 peer
		"[2001:db8:1:ff::9]:636":  true,
		"[2001:db8:2::9]:636":     false,
		"192.0.2.77:1":            true,
		"[::1]:1":                 false,
	} {
		if got := p.trustsAddr(netip.MustParseAddrPort(addr).Addr()); got != want {
			t.Errorf("trustsAddr(%s) = %v, want %v", addr, got, want)
		}
	}
	// The loops give a link-local peer without its zone: inside a prefix
	// that covers fe80::/10 it is still never trusted (fail closed). The
	// path through the loops is TestLinkLocalPeerNeverTrusted.
	all := parsed{trusted: []netip.Prefix{netip.MustParsePrefix("::/0")}}
	for _, a := range []string{"fe80::7", "fe80::7%eth0", "febf::1"} {
		if all.trustsAddr(netip.MustParseAddr(a)) {
			t.Errorf("link-local %s trusted by ::/0", a)
		}
	}
	if !all.trustsAddr(netip.MustParseAddr("2001:db8::7")) {
		t.Error("2001:db8::7 not trusted by ::/0")
	}
}

func TestJudge(t *testing.T) {
	tests := []struct {
		trusted, require bool
		k                proxyheader.Kind
		want             string
	}{
		{true, false, proxyheader.V2, ""},
		{true, false, proxyheader.V1, ""},
		{true, false, proxyheader.None, ""},
		{true, true, proxyheader.None, ResultNoHeader},
		{true, true, proxyheader.V2, ""},
		{false, false, proxyheader.V2, ResultSpoofed},
		{false, false, proxyheader.V1, ResultSpoofed},
		{false, true, proxyheader.V1, ResultSpoofed},
		{false, false, proxyheader.None, ""},
		{false, true, proxyheader.None, ""}, // require_header is about trusted sources only
	}
	for _, tt := range tests {
		if got := judge(tt.trusted, tt.k, tt.require).result; got != tt.want {
			t.Errorf("judge(trusted=%v, %v, require=%v) = %q, want %q", tt.trusted, tt.k, tt.require, got, tt.want)
		}
	}
}
