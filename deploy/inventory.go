// Package deploy is the operator's side of the fleet: the inventory
// (fleet.yaml) as the desired state, DNS publishing of the edges as the
// A/AAAA set of one name (RFC 2136 + TSIG), an embedded authoritative DNS
// server, and the convergence that brings DNS and the origin's firewall to
// the inventory in one safe order, resumable through a state file.
//
//	cfg := deploy.DefaultConfig()          // cmd/fleet fills it from fleet.yaml
//	err := cfg.ValidateDNS()
//	pub, err := deploy.NewPublisher(cfg)   // reads and updates the name's RRsets
//	plan, err := deploy.PlanDNS(cfg.Name, live, cfg.Edges, ttl, nil)
//	c := &deploy.Converger{Config: cfg, StatePath: p, DNS: pub, Firewall: fw, Probe: probe}
//	c.DryRun = true; err = c.Run(ctx)      // prints the steps, changes nothing
//	err = c.Run(ctx)                       // the six steps (docs/dns-deploy.md)
//
// The package never reads fleet.yaml itself: cmd/fleet does, with the
// strict loader, into the plain Config below; the probe, the firewall, the
// metrics scrape and the clock are injected.
package deploy

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/firewall"
	"github.com/edgefleet/edgefleet/internal/safefile"
	"github.com/edgefleet/edgefleet/relay"
)

// Config is fleet.yaml (docs/dns-deploy.md).
type Config struct {
	Name   string `mapstructure:"name"` // FQDN whose A/AAAA set is the edge list
	Zone   string `mapstructure:"zone"`
	TTL    int    `mapstructure:"ttl"` // seconds
	DNS    DNS    `mapstructure:"dns"`
	Origin Origin `mapstructure:"origin"` // one origin host (a pool of one)
	// Origins is the origin pool: several hosts, each with its own
	// firewall that convergence keeps in step (pool.go). Give origin or
	// origins, not both; Hosts is the pool either way.
	Origins []Origin `mapstructure:"origins"`
	Probe   Probe    `mapstructure:"probe"`
	Edges   []Edge   `mapstructure:"edges"`
	Deploy  Deploy   `mapstructure:"deploy"` // how fleet deploy installs an edge (render.go)
	// DrainTimeout bounds how long a removed edge stays allowed by the
	// firewall waiting for its active connections to reach zero (after its
	// TTL wait).
	DrainTimeout time.Duration `mapstructure:"drain_timeout"`
	Watch        Watch         `mapstructure:"watch"` // fleet watch (watch.go)
	// Tickets is the pool's session ticket key file (tickets.go).
	Tickets Tickets `mapstructure:"tickets"`
}

// Probe is how fleet reaches the origin through an edge, as an agent
// would (docs/probe.md): a full TLS handshake with the agent's client
// certificate, verified against ServerName, and one LDAP round trip.
type Probe struct {
	CA         string        `mapstructure:"ca"`
	Cert       string        `mapstructure:"cert"`
	Key        string        `mapstructure:"key"`
	ServerName string        `mapstructure:"server_name"` // "" is name
	Budget     time.Duration `mapstructure:"budget"`
	Port       int           `mapstructure:"port"` // the edges' listening port
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

// Origin is one origin host, what its firewall protects: the published
// ports, the external interface they arrive on and the address they are
// published on; in the pool form (origins) also its name and how fleet
// reaches its firewall.
type Origin struct {
	// Name names the host in fleet's output and in the edges' origins
	// (origins only; letters, digits, '-' and '_', never an address).
	Name      string `mapstructure:"name"`
	Ports     []int  `mapstructure:"ports"`
	Interface string `mapstructure:"interface"`
	Address   string `mapstructure:"address"`
	// Config is the origin's own configuration file (origin.yaml), where
	// fleet reads front.trusted_edges to warn about a new edge outside it
	// (optional).
	Config string `mapstructure:"config"`
	// Metrics is the origin's Prometheus endpoint as fleet reaches it
	// (host:port or a URL; optional): where `fleet status` reads each
	// edge's refused connections per second.
	Metrics string `mapstructure:"metrics"`
	// SSH is user@host[:port] where fleet reaches this host's firewall,
	// with the pinned HostKey (authorized_keys format) as deploy push
	// reaches an edge; empty: the firewall is the one of the host fleet
	// runs on (origins only).
	SSH     string `mapstructure:"ssh"`
	HostKey string `mapstructure:"host_key"`
	// Fleet is the fleet binary on that host, which fleet runs there over
	// SSH to drive its iptables (fleet firewall host); empty: "fleet"
	// from the remote PATH.
	Fleet string `mapstructure:"fleet"`
}

// Local reports whether fleet reaches the host's firewall on the host it
// runs on (no ssh).
func (o Origin) Local() bool { return o.SSH == "" }

// Hosts are the origin hosts: origins, or the one origin (named
// "origin"). A pool entry without ports has the default 8636.
func (c Config) Hosts() []Origin {
	if len(c.Origins) == 0 {
		o := c.Origin
		if o.Name == "" {
			o.Name = "origin"
		}
		return []Origin{o}
	}
	out := make([]Origin, len(c.Origins))
	for i, o := range c.Origins {
		if len(o.Ports) == 0 {
			o.Ports = DefaultConfig().Origin.Ports
		}
		out[i] = o
	}
	return out
}

// Pool reports whether the inventory uses the pool form (origins).
func (c Config) Pool() bool { return len(c.Origins) > 0 }

// Ports are every origin host's ports, sorted, each once.
func (c Config) Ports() []int {
	var ports []int
	for _, o := range c.Hosts() {
		for _, p := range o.Ports {
			if !slices.Contains(ports, p) {
				ports = append(ports, p)
			}
		}
	}
	slices.Sort(ports)
	return ports
}

// Edge is one relay of the fleet.
type Edge struct {
	Name    string `mapstructure:"name"`
	IPv4    string `mapstructure:"ipv4"`
	IPv6    string `mapstructure:"ipv6"`
	SSH     string `mapstructure:"ssh"`      // user@host[:port] for deploy push
	HostKey string `mapstructure:"host_key"` // pinned SSH host key (authorized_keys format)
	// Metrics is the edge's Prometheus endpoint as the operator reaches it
	// (host:port or a URL; optional): where fleet reads its active
	// connections while it drains.
	Metrics string `mapstructure:"metrics"`
}

// String is the edge as --in takes it: name=ipv4[,ipv6].
func (e Edge) String() string {
	var a []string
	for _, s := range []string{e.IPv4, e.IPv6} {
		if s != "" {
			a = append(a, s)
		}
	}
	return e.Name + "=" + strings.Join(a, ",")
}

// Addrs are the edge's addresses, IPv4 first; unparsable ones are left
// out (Validate reports them).
func (e Edge) Addrs() []netip.Addr {
	var out []netip.Addr
	for _, s := range []string{e.IPv4, e.IPv6} {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// DefaultConfig is fleet.yaml's defaults: TTL 60 s, hmac-sha256, the origin
// front's default port 8636, edges probed on 636 with a 2 s budget, a 30 s
// drain timeout.
func DefaultConfig() Config {
	return Config{
		TTL:          60,
		DNS:          DNS{TSIG: TSIG{Algorithm: "hmac-sha256"}},
		Origin:       Origin{Ports: []int{8636}},
		Probe:        Probe{Budget: 2 * time.Second, Port: 636},
		DrainTimeout: 30 * time.Second,
		Deploy:       DefaultDeploy(),
		Watch:        DefaultWatch(),
		Tickets:      DefaultTickets(),
	}
}

// maxEdgeName is the longest edge name (a DNS label's length), in the
// inventory and in the state file alike.
const maxEdgeName = 63

var (
	edgeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	label    = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
)

// tsigAlgorithms are the names RFC 8945 and BIND accept.
var tsigAlgorithms = map[string]bool{
	"hmac-sha256": true, "hmac-sha384": true, "hmac-sha512": true, "hmac-sha224": true, "hmac-sha1": true,
}

// Validate reports every bad value, one per line, each naming its key.
// An empty edge list is not an error here: the commands that would lock
// everyone out with it (firewall) refuse it themselves.
func (c Config) Validate() error {
	var p problems
	c.checkNames(&p)
	c.DNS.check(&p)
	c.Probe.check(&p)
	if c.DrainTimeout <= 0 {
		p.bad("drain_timeout", "%v is not a positive duration", c.DrainTimeout)
	}
	p.add(c.Watch.Validate())
	c.checkOrigins(&p)
	switch c.Deploy.Balance {
	case "", relay.BalanceFailover, relay.BalanceRoundRobin, relay.BalanceLeastConn:
	default:
		p.bad("deploy.balance", "%q is not failover, round-robin or least-conn", c.Deploy.Balance)
	}
	checkEdges(&p, c.Edges)
	return errors.Join(p...)
}

// problems collects what Validate finds, in the order of the file's keys.
type problems []error

// bad adds a problem with key: "key: format…".
func (p *problems) bad(key, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
}

// add adds err, unless it is nil.
func (p *problems) add(err error) {
	if err != nil {
		*p = append(*p, err)
	}
}

// checkNames checks name, zone and ttl: the record set's name, inside
// its zone.
func (c Config) checkNames(p *problems) {
	if c.Name != "" && !isDomain(c.Name) {
		p.bad("name", "%q is not a domain name", c.Name)
	}
	if c.Zone != "" && !isDomain(c.Zone) {
		p.bad("zone", "%q is not a domain name", c.Zone)
	}
	if c.Name != "" && c.Zone != "" && isDomain(c.Name) && isDomain(c.Zone) && !inZone(c.Name, c.Zone) {
		p.bad("name", "%q is not inside zone %q", c.Name, c.Zone)
	}
	if c.TTL <= 0 || c.TTL > 1<<31-1 {
		p.bad("ttl", "%d is not a positive number of seconds", c.TTL)
	}
}

// check checks dns: the server's address and, when any of it is given,
// the whole TSIG key.
func (d DNS) check(p *problems) {
	if d.Server != "" {
		if _, port, err := net.SplitHostPort(d.Server); err != nil || port == "" {
			p.bad("dns.server", "%q is not host:port", d.Server)
		}
	}
	t := d.TSIG
	if t.Name == "" && t.Secret == "" && t.SecretFile == "" {
		return
	}
	if t.Name == "" || !isDomain(t.Name) {
		p.bad("dns.tsig.name", "%q is not a key name", t.Name)
	}
	if !tsigAlgorithms[strings.TrimSuffix(strings.ToLower(t.Algorithm), ".")] {
		p.bad("dns.tsig.algorithm", "%q is not one of hmac-sha256, hmac-sha384, hmac-sha512, hmac-sha224, hmac-sha1", t.Algorithm)
	}
	switch {
	case t.Secret != "" && t.SecretFile != "":
		p.bad("dns.tsig", "give secret or secret_file, not both")
	case t.Secret == "" && t.SecretFile == "":
		p.bad("dns.tsig", "secret or secret_file is required")
	default:
		_, err := t.LoadSecret()
		p.add(err)
	}
}

// check checks probe: the budget, the edges' port, the server name and
// the client certificate's two halves.
func (pr Probe) check(p *problems) {
	if pr.Budget <= 0 {
		p.bad("probe.budget", "%v is not a positive duration", pr.Budget)
	}
	if pr.Port < 1 || pr.Port > 65535 {
		p.bad("probe.port", "%d is not a TCP port", pr.Port)
	}
	if pr.ServerName != "" && !isDomain(pr.ServerName) {
		p.bad("probe.server_name", "%q is not a host name", pr.ServerName)
	}
	if (pr.Cert == "") != (pr.Key == "") {
		p.bad("probe", "give both cert and key, or neither")
	}
}

// checkOrigins checks origin, or origins: one form, each host valid, the
// pool's names and addresses each used once, one host at most reached
// locally.
func (c Config) checkOrigins(p *problems) {
	if !c.Pool() {
		c.Origin.check(p, "origin", false)
		return
	}
	if !reflect.DeepEqual(c.Origin, DefaultConfig().Origin) {
		p.bad("origin", "give origin (one host) or origins (a pool), not both")
	}
	names, addrs := map[string]int{}, map[netip.Addr]int{}
	local := -1
	for i, o := range c.Hosts() {
		key := fmt.Sprintf("origins[%d]", i)
		o.check(p, key, true)
		if j, dup := names[o.Name]; dup && o.Name != "" {
			p.bad(key+".name", "%q is the name of origins[%d]", o.Name, j)
		}
		names[o.Name] = i
		if a, err := netip.ParseAddr(o.Address); err == nil {
			if j, dup := addrs[a]; dup {
				p.bad(key+".address", "%s is the address of origins[%d] too", a, j)
			}
			addrs[a] = i
		}
		if o.Local() {
			if local >= 0 {
				p.bad(key+".ssh", "origins[%d] is reached locally already: only the host fleet runs on can be (give ssh and host_key)", local)
			}
			local = i
		}
	}
}

// check checks one origin host at key: at least one port, each once, the
// interface and address the firewall pins, its metrics endpoint; in the
// pool also its name and how its firewall is reached.
func (o Origin) check(p *problems, key string, pool bool) {
	if len(o.Ports) == 0 {
		p.bad(key+".ports", "at least one port is required")
	}
	seenPort := map[int]bool{}
	for i, port := range o.Ports {
		if port < 1 || port > 65535 {
			p.bad(fmt.Sprintf("%s.ports[%d]", key, i), "%d is not a TCP port", port)
		} else if seenPort[port] {
			p.bad(fmt.Sprintf("%s.ports[%d]", key, i), "%d is listed twice", port)
		}
		seenPort[port] = true
	}
	if o.Interface != "" && !firewall.IsInterfaceName(o.Interface) {
		p.bad(key+".interface", "%q is not an interface name", o.Interface)
	}
	if o.Address != "" {
		if a, err := netip.ParseAddr(o.Address); err != nil || a.Zone() != "" {
			p.bad(key+".address", "%q is not an IP address", o.Address)
		}
	}
	if o.Metrics != "" && !validMetrics(o.Metrics) {
		p.bad(key+".metrics", "%q is not host:port or an http(s) URL", o.Metrics)
	}
	if !pool {
		for _, kv := range [][2]string{{"name", o.Name}, {"ssh", o.SSH}, {"host_key", o.HostKey}, {"fleet", o.Fleet}} {
			if kv[1] != "" {
				p.bad(key+"."+kv[0], "only an origin host of origins has one (a pool: origins: [{name: …, ssh: …}])")
			}
		}
		return
	}
	if !originName.MatchString(o.Name) {
		p.bad(key+".name", "%q is not a name (letters, digits, - _; never an address)", o.Name)
	}
	switch {
	case o.SSH == "" && o.HostKey != "":
		p.bad(key+".host_key", "given without ssh")
	case o.SSH == "" && o.Fleet != "":
		p.bad(key+".fleet", "given without ssh")
	case o.SSH != "" && o.HostKey == "":
		p.bad(key+".host_key", "required with ssh: the host key is pinned, any other is refused")
	case o.SSH != "":
		if _, _, err := ParseSSHTarget(o.SSH); err != nil {
			p.bad(key+".ssh", "%v", err)
		}
		if _, err := ParseHostKey(o.HostKey); err != nil {
			p.bad(key+".host_key", "%v", err)
		}
	}
}

// originName is an origin host's name: what the edges call it in their
// metrics and logs, so never an address (relay's origin names).
var originName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}$`)

// checkEdges checks edges: each one's name (used once), its addresses
// (one host's each, no address shared with another edge) and its metrics
// endpoint.
func checkEdges(p *problems, edges []Edge) {
	seen := map[string]bool{}
	owner := map[netip.Addr]int{} // address → the index of the edge listing it first
	for i, e := range edges {
		key := fmt.Sprintf("edges[%d]", i)
		if !edgeName.MatchString(e.Name) {
			p.bad(key+".name", "%q is not a name (letters, digits, . _ -)", e.Name)
		} else if seen[e.Name] {
			p.bad(key+".name", "%q is used twice", e.Name)
		}
		seen[e.Name] = true
		e.checkAddrs(p, key)
		for fam, a := range map[string]string{"ipv4": e.IPv4, "ipv6": e.IPv6} {
			ip, err := netip.ParseAddr(a)
			if err != nil {
				continue
			}
			if other, dup := owner[ip]; dup && other != i {
				p.bad(key+"."+fam, "%s is already the address of edge %q (edges[%d])", ip, edges[other].Name, other)
				continue
			}
			owner[ip] = i
		}
		if e.Metrics != "" && !validMetrics(e.Metrics) {
			p.bad(key+".metrics", "%q is not host:port or an http(s) URL", e.Metrics)
		}
	}
}

// checkAddrs checks that the edge at key has an address, and that each
// it has is one host's of its family.
func (e Edge) checkAddrs(p *problems, key string) {
	if e.IPv4 == "" && e.IPv6 == "" {
		p.bad(key, "edge %q has neither ipv4 nor ipv6", e.Name)
	}
	if e.IPv4 != "" {
		if a, err := netip.ParseAddr(e.IPv4); err != nil || !a.Is4() {
			p.bad(key+".ipv4", "%q is not an IPv4 address", e.IPv4)
		} else if a.IsUnspecified() || a.IsMulticast() {
			p.bad(key+".ipv4", "%s is not the address of one host", a)
		}
	}
	if e.IPv6 != "" {
		if a, err := netip.ParseAddr(e.IPv6); err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" {
			p.bad(key+".ipv6", "%q is not an IPv6 address", e.IPv6)
		} else if a.IsUnspecified() || a.IsMulticast() {
			p.bad(key+".ipv6", "%s is not the address of one host", a)
		}
	}
}

// ValidateDNS is Validate plus what publishing needs: name, zone,
// dns.server and a TSIG key.
func (c Config) ValidateDNS() error {
	var errs []error
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	for key, v := range map[string]string{"name": c.Name, "zone": c.Zone, "dns.server": c.DNS.Server, "dns.tsig.name": c.DNS.TSIG.Name} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s: required to publish the edges", key))
		}
	}
	return errors.Join(errs...)
}

// maxSecretFile bounds dns.tsig.secret_file: a key clause is a few
// hundred bytes.
const maxSecretFile = 64 << 10

// LoadSecret returns the key's base64 secret: secret itself, or read from
// secret_file, which holds either the bare base64 secret or a key clause
// as tsig-keygen prints it (the file BIND includes).
func (t TSIG) LoadSecret() (string, error) {
	secret := t.Secret
	if t.SecretFile != "" {
		b, err := safefile.Read(t.SecretFile, maxSecretFile, nil)
		if err != nil {
			return "", fmt.Errorf("dns.tsig.secret_file: %w", err)
		}
		secret = strings.TrimSpace(string(b))
		if m := keyClauseSecret.FindStringSubmatch(secret); m != nil {
			secret = m[1]
		}
		if secret == "" {
			return "", fmt.Errorf("dns.tsig.secret_file: %s is empty", t.SecretFile)
		}
	}
	key := "dns.tsig.secret"
	if t.SecretFile != "" {
		key = "dns.tsig.secret_file"
	}
	if b, err := base64.StdEncoding.DecodeString(secret); err != nil || len(b) == 0 {
		return "", fmt.Errorf("%s: the secret is not base64", key)
	}
	return secret, nil
}

var keyClauseSecret = regexp.MustCompile(`secret\s+"([^"]+)"\s*;`)

func validMetrics(s string) bool {
	if strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") {
		return len(s) > len("https://")
	}
	host, port, err := net.SplitHostPort(s)
	return err == nil && host != "" && port != ""
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

// CheckEdgeAddrs refuses an edge address that can never be an edge:
// unspecified, broadcast, multicast, loopback (unless allowLoopback: the
// one-machine demo), or an address of the origin itself (origin.address,
// and own: the addresses of the host fleet runs on when it is the
// origin's) — publishing the origin would bypass the edges.
func (c Config) CheckEdgeAddrs(allowLoopback bool, own []netip.Addr) error {
	var errs []error
	origin := map[netip.Addr]bool{}
	for _, a := range own {
		origin[a.Unmap()] = true
	}
	for _, o := range c.Hosts() {
		if a, err := netip.ParseAddr(o.Address); err == nil {
			origin[a.Unmap()] = true
		}
	}
	for i, e := range c.Edges {
		for fam, s := range map[string]string{"ipv4": e.IPv4, "ipv6": e.IPv6} {
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			key := fmt.Sprintf("edges[%d].%s", i, fam)
			switch {
			case a.IsUnspecified(), a.IsMulticast(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
				errs = append(errs, fmt.Errorf("%s: %s (edge %q) is not the address of one host", key, a, e.Name))
			case a.IsLoopback() && !allowLoopback:
				errs = append(errs, fmt.Errorf("%s: %s (edge %q) is a loopback address: no agent can reach it (--allow-loopback for a fleet on one machine)", key, a, e.Name))
			case origin[a] && !a.IsLoopback():
				errs = append(errs, fmt.Errorf("%s: %s (edge %q) is an address of the origin: publishing it would let agents bypass the edges", key, a, e.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// Untrusted lists the addresses of the edges not yet published that no
// prefix of trusted (the origin's front.trusted_edges) contains, as
// "e3 10.77.0.13": the origin would not honour their PROXY headers.
func Untrusted(edges []Edge, st *State, trusted []netip.Prefix) []string {
	var out []string
	for _, e := range edges {
		if s := st.Edges[e.Name]; s != nil && s.State == StateActive {
			continue
		}
		for _, a := range e.Addrs() {
			if !slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(a.Unmap()) }) {
				out = append(out, e.Name+" "+a.String())
			}
		}
	}
	return out
}
