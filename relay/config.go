package relay

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/edgefleet/edgefleet/internal/evloop"
	"github.com/edgefleet/edgefleet/internal/listenaddr"
)

// Config is the edge's configuration (docs/edge.md). cmd/edge fills it from
// YAML, the environment and flags; the package itself never reads files.
type Config struct {
	Name           string        `mapstructure:"name"`            // sent in TLV 0xE0; default: hostname
	Listen         []string      `mapstructure:"listen"`          // used by cmd/edge; Serve takes any listener
	Origins        []Origin      `mapstructure:"origins"`         // tried in the order Balance gives
	Balance        string        `mapstructure:"balance"`         // failover, round-robin or least-conn
	ConnectTimeout time.Duration `mapstructure:"connect_timeout"` // per origin attempt
	OfflineRetry   time.Duration `mapstructure:"offline_retry"`   // how long a failed origin stays OFFLINE
	ProxyProtocol  string        `mapstructure:"proxy_protocol"`  // v2, v1 or off
	MaxConns       int           `mapstructure:"max_conns"`       // open client connections at most
	DrainTimeout   time.Duration `mapstructure:"drain_timeout"`   // Shutdown's grace period
	Keepalive      time.Duration `mapstructure:"keepalive"`       // TCP keepalive period both sides; 0 disables
	// Source is the local IP origin connections are made from (HAProxy's
	// source, nginx's proxy_bind); empty: the kernel picks.
	Source string `mapstructure:"source"`
	// Limits is the admission before any origin is dialled (admit.go).
	Limits Limits `mapstructure:"limits"`
	// TLSGate holds connections until a ClientHello arrives (gate.go).
	TLSGate TLSGate `mapstructure:"tls_gate"`
}

// Origin is one entry of origins: the host:port the edge dials, and the
// name it goes by everywhere the edge speaks — the origin label of
// edgefleet_edge_origin_up, log lines, errors. The address is what the
// edges exist to hide, and anyone who reaches an edge's metrics or reads
// its shipped logs would learn it. In a file an entry is a section
// ({name: o1, address: "10.1.2.3:8636"}) or a plain "host:port"; an
// origin without a name is o1, o2, … by its position in the list.
type Origin struct {
	Name    string `mapstructure:"name"`
	Address string `mapstructure:"address"`
}

// UnmarshalText reads the plain form of an entry, "host:port" (the
// environment, flags and a list of strings in the file).
func (o *Origin) UnmarshalText(b []byte) error {
	*o = Origin{Address: string(b)}
	return nil
}

// OriginList is origins given by address alone (named by position).
func OriginList(addrs ...string) []Origin {
	out := make([]Origin, len(addrs))
	for i, a := range addrs {
		out[i] = Origin{Address: a}
	}
	return out
}

// named returns origins with every name filled in: an entry without one
// is o1, o2, … by its position.
func named(origins []Origin) []Origin {
	out := make([]Origin, len(origins))
	for i, o := range origins {
		if o.Name == "" {
			o.Name = "o" + strconv.Itoa(i+1)
		}
		out[i] = o
	}
	return out
}

// Names returns the origins' names in order (what the edge logs).
func Names(origins []Origin) []string {
	out := make([]string, 0, len(origins))
	for _, o := range named(origins) {
		out = append(out, o.Name)
	}
	return out
}

// maxOriginName bounds an origin's name (a label value, a log field).
const maxOriginName = 63

// checkOriginName accepts letters, digits, '-' and '_': no dot and no
// colon, so a name can be neither an IP address nor a DNS name.
func checkOriginName(n string) error {
	if n == "" || len(n) > maxOriginName {
		return fmt.Errorf("%q must be 1-%d characters", n, maxOriginName)
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("%q may hold only letters, digits, '-' and '_' (a name, never an address)", n)
		}
	}
	return nil
}

// Values of Config.Balance: how each new connection picks among the
// selectable origins.
const (
	BalanceFailover   = "failover"    // the first in configured order
	BalanceRoundRobin = "round-robin" // each in turn
	BalanceLeastConn  = "least-conn"  // the one with the fewest connections, each in turn among equals
)

// Values of Config.ProxyProtocol.
const (
	ProxyV2  = "v2"
	ProxyV1  = "v1"
	ProxyOff = "off"
)

// maxNameLen keeps the 0xE0 TLV (and log lines) short; a host name is at
// most 253 bytes anyway.
const maxNameLen = 255

// MaxConnsCap is max_conns's default where RLIMIT_NOFILE allows it (and
// DefaultConfig's, for a configuration rendered for another host).
const MaxConnsCap = 100000

// descriptorReserve is what the edge keeps for itself besides its
// connections: listeners, the event loops, the metrics endpoint's
// connections, the resolver's sockets.
const descriptorReserve = 256

// Descriptors is the most file descriptors an edge with max_conns n
// holds: two sockets per connection, the splice pipes the event loops
// may hold (a quarter of n, at least 64, two descriptors each, and as
// many idle in the pool) and the reserve: about 2.5 per connection.
func Descriptors(n int) int { return evloop.DescriptorsFor(n) + descriptorReserve }

// MaxConnsFor is max_conns's default under an RLIMIT_NOFILE of nofile:
// the most connections whose Descriptors fit, at most MaxConnsCap (as
// HAProxy derives maxconn from ulimit -n).
func MaxConnsFor(nofile uint64) int {
	return evloop.MaxConnsFor(nofile, 0, descriptorReserve, MaxConnsCap)
}

// DefaultConfig returns the defaults of docs/edge.md. Origins has no
// default: it must be given.
func DefaultConfig() Config {
	name, _ := os.Hostname()
	return Config{
		Name:           name,
		Listen:         []string{":636"},
		Balance:        BalanceFailover,
		ConnectTimeout: 3 * time.Second,
		OfflineRetry:   60 * time.Second,
		ProxyProtocol:  ProxyV2,
		MaxConns:       MaxConnsCap,
		DrainTimeout:   30 * time.Second,
		Keepalive:      15 * time.Second,
		Limits:         DefaultLimits(),
		TLSGate:        defaultTLSGate(),
	}
}

// Validate names the first bad value, by its configuration key.
func (c Config) Validate() error {
	if c.Name == "" {
		return fmt.Errorf("name: must not be empty")
	}
	if len(c.Name) > maxNameLen {
		return fmt.Errorf("name: longer than %d bytes", maxNameLen)
	}
	for _, r := range c.Name {
		if r < 0x21 || r > 0x7e {
			return fmt.Errorf("name: %q must be printable ASCII without spaces", c.Name)
		}
	}
	if len(c.Listen) == 0 {
		return fmt.Errorf("listen: at least one address is required")
	}
	for _, a := range c.Listen {
		if err := checkHostPort(a, true); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	if len(c.Origins) == 0 {
		return fmt.Errorf("origins: at least one origin (host:port) is required")
	}
	addrs, names := map[string]bool{}, map[string]bool{}
	for i, o := range c.Origins {
		if err := checkHostPort(o.Address, false); err != nil {
			return fmt.Errorf("origins: %w", err)
		}
		if addrs[o.Address] {
			return fmt.Errorf("origins: %q is listed twice", o.Address)
		}
		addrs[o.Address] = true
		if o.Name != "" {
			if err := checkOriginName(o.Name); err != nil {
				return fmt.Errorf("origins[%d].name: %w", i, err)
			}
		}
	}
	for i, o := range named(c.Origins) {
		if names[o.Name] {
			return fmt.Errorf("origins[%d].name: %q is the name of another origin", i, o.Name)
		}
		names[o.Name] = true
	}
	switch {
	case c.Balance != "" && c.Balance != BalanceFailover && c.Balance != BalanceRoundRobin && c.Balance != BalanceLeastConn:
		return fmt.Errorf("balance: %q is not failover, round-robin or least-conn", c.Balance)
	case c.ConnectTimeout <= 0:
		return fmt.Errorf("connect_timeout: %v must be positive", c.ConnectTimeout)
	case c.OfflineRetry < 0:
		return fmt.Errorf("offline_retry: %v must not be negative", c.OfflineRetry)
	case c.ProxyProtocol != ProxyV2 && c.ProxyProtocol != ProxyV1 && c.ProxyProtocol != ProxyOff:
		return fmt.Errorf("proxy_protocol: %q is not v2, v1 or off", c.ProxyProtocol)
	case c.MaxConns <= 0:
		return fmt.Errorf("max_conns: %d must be positive", c.MaxConns)
	case c.DrainTimeout < 0:
		return fmt.Errorf("drain_timeout: %v must not be negative", c.DrainTimeout)
	case c.Keepalive < 0:
		return fmt.Errorf("keepalive: %v must not be negative (0 disables)", c.Keepalive)
	}
	if c.Source != "" && net.ParseIP(c.Source) == nil {
		return fmt.Errorf("source: %q is not an IP address (empty: the kernel picks)", c.Source)
	}
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	if (c.Limits.PerSource.on() || c.Limits.PerPrefix.on()) && c.Limits.TableSize < c.MaxConns {
		// Every source holding one connection would pin every key: the
		// next new source would be refused while max_conns has room.
		return fmt.Errorf("limits.table_size: %d is below max_conns %d: a table full of open sources would refuse new ones", c.Limits.TableSize, c.MaxConns)
	}
	return c.TLSGate.validate()
}

// CheckSelf reports an origin that is the edge itself, in any spelling
// (localhost, an IPv4-mapped address, 0.0.0.0, an address of this host
// under a wildcard listen): every connection would be relayed to itself.
// Unlike Validate it depends on the host it runs on (its addresses, its
// resolver), so it is checked where the edge runs — New and cmd/edge —
// not where a configuration is rendered for another machine.
func (c Config) CheckSelf() error {
	for _, o := range c.Origins {
		if l := listenaddr.SelfTarget(c.Listen, o.Address); l != "" {
			return fmt.Errorf("origins: %q is the edge's own listen address %q: every connection would be relayed to itself", o.Address, l)
		}
	}
	if c.Source != "" {
		// Every origin connection would fail to bind: say so at start,
		// not as one OFFLINE origin after another.
		ln, err := net.Listen("tcp", net.JoinHostPort(c.Source, "0"))
		if err != nil {
			return fmt.Errorf("source: %q is not an address of this host: %v", c.Source, errors.Unwrap(err))
		}
		ln.Close()
	}
	return nil
}

// checkHostPort accepts "host:port" with a numeric port; a listen address
// may leave the host empty (all interfaces).
func checkHostPort(a string, listen bool) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port", a)
	}
	if host == "" && !listen {
		return fmt.Errorf("%q has no host", a)
	}
	p, err := strconv.Atoi(port)
	switch {
	case err != nil:
		return fmt.Errorf("%q: bad port %q", a, port)
	case listen && (p < 0 || p > 65535): // 0: the kernel picks one (tests)
		return fmt.Errorf("%q: port %d is outside 1-65535", a, p)
	case !listen && (p < 1 || p > 65535):
		return fmt.Errorf("%q: port %d is outside 1-65535", a, p)
	}
	return nil
}
