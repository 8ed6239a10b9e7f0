package origin

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/internal/evloop"
	"github.com/edgefleet/edgefleet/internal/listenaddr"
	"github.com/edgefleet/edgefleet/internal/tokenbucket"
)

// Untrusted policies: what happens to a connection from outside
// trusted_edges.
const (
	// UntrustedPassthrough forwards a connection without a header from any
	// source (a header from an untrusted source is still a spoof and closed).
	UntrustedPassthrough = "passthrough"
	// UntrustedReject closes every connection from outside trusted_edges at
	// once, before reading a byte.
	UntrustedReject = "reject"
)

// Config is the `front:` section of the origin's configuration
// (docs/origin.md). TrustedEdges is parsed once by New into a private twin.
type Config struct {
	// Listen is the list of host:port addresses the front accepts on.
	Listen []string `mapstructure:"listen"`
	// Inner is the host:port of the service every connection is forwarded
	// to (the LDAP core).
	Inner string `mapstructure:"inner"`
	// TrustedEdges lists the CIDRs (or single addresses) whose PROXY
	// headers are honoured.
	TrustedEdges []string `mapstructure:"trusted_edges"`
	// Untrusted is "passthrough" or "reject".
	Untrusted string `mapstructure:"untrusted"`
	// RequireHeader closes a trusted source's connection that carries no
	// PROXY header.
	RequireHeader bool `mapstructure:"require_header"`
	// HeaderTimeout bounds how long a connection may take to deliver its
	// first bytes and, when it starts a PROXY header, the whole header.
	HeaderTimeout time.Duration `mapstructure:"header_timeout"`
	// MaxConns is the most connections the front holds open at once; one
	// more is closed at once (result max-conns). The edge's default.
	MaxConns int `mapstructure:"max_conns"`
	// PerEdge is each edge's fair share of the front: keyed by the
	// measured source, never by the claimed address.
	PerEdge PerEdge `mapstructure:"per_edge"`
}

// PerEdge is the `front.per_edge:` section: the limits the front keeps
// for each trusted edge address, and once for every untrusted source
// together (docs/origin.md, "Fair share per edge").
type PerEdge struct {
	// Conns is the most connections one edge may hold open at once; 0
	// sets no cap.
	Conns int `mapstructure:"conns"`
	// Rate is the new connections per second an edge may open, "N/s",
	// "N/m" or "N/h" (tokenbucket.ParseRate); "0" sets no limit.
	Rate string `mapstructure:"rate"`
	// Burst is how many connections an edge may open at once above Rate
	// (the bucket's size).
	Burst int `mapstructure:"burst"`
}

// Defaults of front.per_edge: an edge in front of thousands of agents
// reconnecting at once (an origin restart) gets them all in within a few
// seconds; one edge still cannot hold more than a fifth of the default
// max_conns or open more than a thousand connections a second.
const (
	DefaultPerEdgeConns = 20000
	DefaultPerEdgeRate  = "1000/s"
	DefaultPerEdgeBurst = 2000
)

// DefaultMaxConns is front.max_conns's default where RLIMIT_NOFILE
// allows it (the edge's cap, docs/edge.md).
const DefaultMaxConns = 100000

// descriptorReserve is what the origin keeps for itself besides the
// connections: listeners, loops, the HTTP endpoints, the core's health
// checks and files.
const descriptorReserve = 256

// Descriptors is the most file descriptors the origin holds with
// front.max_conns n: the front's two sockets per connection and the
// splice pipes its loops may hold (about 2.5 per connection), two more
// per connection when the core runs in the process (the inner
// connection's accepted end and the connection to a server), and the
// reserve.
func Descriptors(n int, core bool) int {
	d := evloop.DescriptorsFor(n) + descriptorReserve
	if core {
		d += 2 * n
	}
	return d
}

// MaxConnsFor is front.max_conns's default under an RLIMIT_NOFILE of
// nofile: the most connections whose Descriptors fit, at most
// DefaultMaxConns (as HAProxy derives maxconn from ulimit -n).
func MaxConnsFor(nofile uint64, core bool) int {
	extra := 0
	if core {
		extra = 2
	}
	return evloop.MaxConnsFor(nofile, extra, descriptorReserve, DefaultMaxConns)
}

// DefaultConfig is the front's configuration with the defaults of docs/origin.md.
func DefaultConfig() Config {
	return Config{
		Listen:        []string{":8636"},
		Inner:         "127.0.0.1:1636",
		TrustedEdges:  []string{},
		Untrusted:     UntrustedPassthrough,
		RequireHeader: false,
		HeaderTimeout: 5 * time.Second,
		MaxConns:      DefaultMaxConns,
		PerEdge:       PerEdge{Conns: DefaultPerEdgeConns, Rate: DefaultPerEdgeRate, Burst: DefaultPerEdgeBurst},
	}
}

// Validate names the first bad value, with its key under front.
func (c Config) Validate() error {
	_, err := c.parse()
	return err
}

// parsed is Config's private twin, filled once.
type parsed struct {
	trusted []netip.Prefix
	edges   []string         // trusted_edges as written
	rate    tokenbucket.Rate // per_edge.rate and per_edge.burst
}

func (c Config) parse() (parsed, error) {
	var p parsed
	if len(c.Listen) == 0 {
		return p, errors.New("front.listen: at least one address is required")
	}
	for _, l := range c.Listen {
		_, port, err := net.SplitHostPort(l)
		if err != nil {
			return p, fmt.Errorf("front.listen: %q is not host:port", l)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 { // 0: the kernel picks (tests)
			return p, fmt.Errorf("front.listen: %q: port %q is outside 1-65535", l, port)
		}
	}
	ihost, iport, err := net.SplitHostPort(c.Inner)
	if err != nil || ihost == "" || iport == "" {
		return p, fmt.Errorf("front.inner: %q is not host:port", c.Inner)
	}
	if n, err := strconv.Atoi(iport); err != nil || n < 1 || n > 65535 {
		return p, fmt.Errorf("front.inner: %q: port %q is outside 1-65535", c.Inner, iport)
	}
	if l := listenaddr.SelfTarget(c.Listen, c.Inner); l != "" {
		return p, fmt.Errorf("front.inner: %q is the front's own listen address %q: every connection would be forwarded to itself", c.Inner, l)
	}
	for _, s := range c.TrustedEdges {
		pf, err := parsePrefix(s)
		if errors.Is(err, errShortMapped) {
			return p, fmt.Errorf("front.trusted_edges: %q is not a CIDR or an IP address (%w)", s, err)
		}
		if err != nil {
			return p, fmt.Errorf("front.trusted_edges: %q is not a CIDR or an IP address", s)
		}
		if linkLocal.Bits() <= pf.Bits() && linkLocal.Contains(pf.Addr()) {
			return p, fmt.Errorf("front.trusted_edges: %q is link-local: a link-local peer is never trusted (a prefix cannot name its link)", s)
		}
		p.trusted = append(p.trusted, pf)
	}
	p.edges = append([]string{}, c.TrustedEdges...)
	switch c.Untrusted {
	case UntrustedPassthrough:
	case UntrustedReject:
		if len(p.trusted) == 0 {
			return p, errors.New("front.untrusted: reject with an empty trusted_edges would close every connection")
		}
	default:
		return p, fmt.Errorf("front.untrusted: %q is not passthrough or reject", c.Untrusted)
	}
	if c.HeaderTimeout <= 0 {
		return p, fmt.Errorf("front.header_timeout: %v must be positive", c.HeaderTimeout)
	}
	if c.MaxConns <= 0 {
		return p, fmt.Errorf("front.max_conns: %d must be positive", c.MaxConns)
	}
	p.rate, err = c.PerEdge.parse()
	return p, err
}

// parse checks per_edge and returns its rate.
func (e PerEdge) parse() (tokenbucket.Rate, error) {
	if e.Conns < 0 {
		return tokenbucket.Rate{}, fmt.Errorf("front.per_edge.conns: %d is negative (0: no cap)", e.Conns)
	}
	perSec, err := tokenbucket.ParseRate(e.Rate)
	if err != nil {
		return tokenbucket.Rate{}, fmt.Errorf("front.per_edge.rate: %w", err)
	}
	if e.Burst < 0 {
		return tokenbucket.Rate{}, fmt.Errorf("front.per_edge.burst: %d is negative", e.Burst)
	}
	if perSec > 0 && e.Burst < 1 {
		return tokenbucket.Rate{}, fmt.Errorf("front.per_edge.burst: %d must be at least 1 with a rate", e.Burst)
	}
	return tokenbucket.Rate{PerSec: perSec, Burst: float64(e.Burst)}, nil
}

// linkLocal is IPv6's link-local unicast prefix.
var linkLocal = netip.MustParsePrefix("fe80::/10")

var errShortMapped = errors.New("an IPv4-mapped prefix needs at least /96")

// parsePrefix accepts "10.0.0.0/8", "2001:db8::/32" and single addresses
// ("10.1.2.3", "::1") as a one-address prefix.
func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, err
		}
		if p.Addr().Is4In6() {
			// Sources are compared in their IPv4 form, so a mapped
			// prefix is turned into its IPv4 twin. Shorter than the
			// mapping itself it would silently become an IPv6 prefix
			// around ::/8, trusting what the operator never meant.
			if p.Bits() < 96 {
				return p, errShortMapped
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// trustsAddr reports whether ip (the measured peer, as the event loops
// give it) is inside trusted_edges. A link-local peer never is, whatever
// the prefixes: the loops' address has no zone (fe80::7 on one link and
// fe80::7 on another are two hosts, and a prefix cannot name a link), so
// the check fails closed.
func (p parsed) trustsAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.Is6() && ip.IsLinkLocalUnicast() {
		return false
	}
	for _, pf := range p.trusted {
		if pf.Contains(ip) {
			return true
		}
	}
	return false
}
