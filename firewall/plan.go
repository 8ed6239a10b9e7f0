package firewall

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/coreos/go-iptables/iptables"
)

// Rule is one rule's specification, the arguments after "-A CHAIN", in the
// canonical order `iptables -S` prints them so live rules compare as text.
type Rule []string

// Family is the rule set of one IP family.
type Family struct {
	Name  string            // "IPv4" or "IPv6"
	Proto iptables.Protocol // which of iptables / ip6tables
	Hook  string            // the chain the jump sits in
	Rules []Rule            // the generation chain's content, in order
	// CreateHook lets Apply create a missing hook chain (Config.CreateChain).
	CreateHook bool
}

// Plan is a complete rule set for one generation: what Apply installs and
// what Check compares the live rules with.
type Plan struct {
	Generation int
	Families   []Family
	// Warnings name what Force let through (skipped addresses, no pin …).
	Warnings []string

	spec   spec
	prefix string // of the generation chain; "" is ChainPrefix
	owner  string // Config.Owner, in the jump's comment
}

// Chain is the generation chain, EDGEFLEET-<generation>.
func (p *Plan) Chain() string { return orDefault(p.prefix) + strconv.Itoa(p.Generation) }

func orDefault(prefix string) string {
	if prefix == "" {
		return ChainPrefix
	}
	return prefix
}

// Jump is the rule in the hook chain that sends traffic to chain, its
// comment naming the owner (Config.Owner) when there is one.
func Jump(chain, owner string) Rule {
	return Rule{"-m", "comment", "--comment", jumpComment(owner), "-j", chain}
}

func jumpComment(owner string) string {
	if owner == "" {
		return commentJump
	}
	return commentJump + " " + owner
}

// jumpOwner is the owner a jump's comment names: "" for none, ok false
// when the comment is not one of ours.
func jumpOwner(args []string) (owner string, ok bool) {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--comment" {
			c := args[i+1]
			if c == commentJump {
				return "", true
			}
			if o, found := strings.CutPrefix(c, commentJump+" "); found {
				return o, true
			}
		}
	}
	return "", false
}

// Comments of the generated rules; every rule carries one.
const (
	commentJump    = "edgefleet: jump"
	commentReplies = "edgefleet: replies"
	// commentEdgePrefix starts the comment of every edge's rule.
	commentEdgePrefix = "edgefleet: edge "
)

// NewPlan builds generation gen's rule set for c without touching iptables.
// It refuses, unless c.Force: a bad edge address, an empty edge list, and
// in DOCKER-USER a rule set pinned neither to an interface nor to an
// address (it would drop the origin's own outbound connections).
func NewPlan(c Config, gen int) (*Plan, error) {
	if c.Chain == "" {
		c.Chain = DockerUser
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if gen < 1 {
		return nil, fmt.Errorf("generation %d: must be at least 1", gen)
	}
	p := &Plan{Generation: gen, owner: c.Owner}
	var refusals []error
	refuse := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if c.Force {
			p.Warnings = append(p.Warnings, msg+" (forced)")
		} else {
			refusals = append(refusals, errors.New(msg))
		}
	}

	var v4, v6 []source
	for _, e := range c.Edges {
		if e.IPv4 == "" && e.IPv6 == "" {
			refuse("edge %s: no address", e.Name)
		}
		if e.IPv4 != "" {
			if a, err := parseAddr(e.IPv4); err != nil || !a.Is4() {
				refuse("edge %s: ipv4 %q is not an IPv4 address", e.Name, e.IPv4)
			} else {
				v4 = append(v4, source{e.Name, a.String() + "/32"})
			}
		}
		if e.IPv6 != "" {
			if a, err := parseAddr(e.IPv6); err != nil || !a.Is6() {
				refuse("edge %s: ipv6 %q is not an IPv6 address", e.Name, e.IPv6)
			} else {
				v6 = append(v6, source{e.Name, a.String() + "/128"})
			}
		}
	}
	if len(v4)+len(v6) == 0 {
		refuse("the edge list is empty: the rules would let no one reach the origin ports")
	}
	addr, _ := parseAddr(c.Address) // Validate checked it
	if c.Chain == DockerUser && c.Interface == "" && c.Address == "" {
		refuse("origin.interface and origin.address are both empty: without a pin the origin's own outbound connections to port %d would be dropped too", c.Ports[0])
	}
	if len(refusals) > 0 {
		return nil, errors.Join(refusals...)
	}

	p.spec = spec{cfg: c, addr: addr, v4: v4, v6: v6}
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		p.Families = append(p.Families, p.family(proto, c.Chain))
	}
	return p, nil
}

// spec is what a plan's families are built from, kept so that Firewall.Plan
// can rebuild a family for another hook chain.
type spec struct {
	cfg    Config
	addr   netip.Addr // origin.address, the zero Addr when not set
	v4, v6 []source
}

// source is one allowed edge address.
type source struct{ edge, cidr string }

// family builds one family's rule set for the given hook chain.
func (p *Plan) family(proto iptables.Protocol, hook string) Family {
	c, addr := p.spec.cfg, p.spec.addr
	f := Family{Name: "IPv4", Proto: proto, Hook: hook, CreateHook: c.CreateChain}
	sources, is4 := p.spec.v4, true
	if proto == iptables.ProtocolIPv6 {
		f.Name, sources, is4 = "IPv6", p.spec.v6, false
	}
	f.Rules = append(f.Rules, Rule{"-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED",
		"-m", "comment", "--comment", commentReplies, "-j", "RETURN"})
	// The pin: which inbound connections the edges' rules are about.
	var iface []string
	if c.Interface != "" {
		iface = []string{"-i", c.Interface}
	}
	var origDst []string
	if addr.IsValid() {
		if addr.Is4() != is4 {
			if c.Interface == "" && hook == DockerUser {
				// The port is published on an address of the other
				// family only: nothing of this family reaches it
				// through DNAT, and unpinned rules would drop the
				// containers' own outbound connections.
				p.Warnings = append(p.Warnings, fmt.Sprintf("%s: no port rules, origin.address %s is of the other family", f.Name, addr))
				return f
			}
		} else {
			origDst = []string{"--ctorigdst", addr.String()}
		}
	}
	for _, port := range c.Ports {
		P := strconv.Itoa(port)
		ct := []string{"-p", "tcp", "-m", "conntrack", "--ctstate", "NEW"}
		ct = append(ct, origDst...)
		ct = append(ct, "--ctorigdstport", P, "--ctdir", "ORIGINAL")
		for _, s := range sources {
			r := Rule{"-s", s.cidr}
			r = append(r, iface...)
			r = append(r, ct...)
			r = append(r, "-m", "comment", "--comment", fmt.Sprintf(commentEdgePrefix+"%s port %d", s.edge, port), "-j", "RETURN")
			f.Rules = append(f.Rules, r)
		}
		if hook == DockerUser {
			r := append(Rule{}, iface...)
			r = append(r, ct...)
			r = append(r, "-m", "comment", "--comment", fmt.Sprintf("edgefleet: others port %d", port), "-j", "DROP")
			f.Rules = append(f.Rules, r)
			// The pin keeps the container's own outbound connections out
			// of the rule above, but it also lets in a stranger that comes
			// through another interface of the host (a second network, a
			// VPN) or to another address the port is published on. What
			// such a connection and an edge's share, and the container's
			// outbound connection lacks, is Docker's DNAT: every
			// connection to a published port is DNAT'ed, no outbound one
			// is.
			f.Rules = append(f.Rules, Rule{"-p", "tcp", "-m", "conntrack", "--ctstate", "DNAT", "--ctorigdstport", P, "--ctdir", "ORIGINAL",
				"-m", "comment", "--comment", fmt.Sprintf("edgefleet: others port %d, any interface", port), "-j", "DROP"})
			continue
		}
		// INPUT sees no outbound connection, so the DROP needs no pin:
		// every interface but loopback (the host's own connections).
		r := Rule{"!", "-i", "lo", "-p", "tcp", "-m", "conntrack", "--ctstate", "NEW", "--ctorigdstport", P, "--ctdir", "ORIGINAL",
			"-m", "comment", "--comment", fmt.Sprintf("edgefleet: others port %d", port), "-j", "DROP"}
		f.Rules = append(f.Rules, r)
	}
	return f
}

// String prints the plan as iptables commands (the -S form), one family
// after the other: what `fleet firewall plan` shows.
func (p *Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# edgefleet firewall, generation %d\n", p.Generation)
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "# warning: %s\n", w)
	}
	for _, f := range p.Families {
		cmd := "iptables"
		if f.Proto == iptables.ProtocolIPv6 {
			cmd = "ip6tables"
		}
		fmt.Fprintf(&b, "\n# %s (%s -t filter), hooked into %s\n", f.Name, cmd, f.Hook)
		fmt.Fprintf(&b, "-N %s\n", p.Chain())
		for _, r := range f.Rules {
			fmt.Fprintf(&b, "%s\n", r.Line("-A", p.Chain()))
		}
		fmt.Fprintf(&b, "%s\n", Jump(p.Chain(), p.owner).Line("-I", f.Hook+" 1"))
	}
	return b.String()
}

// Line renders the rule as `iptables -S` does: "-A CHAIN args…", quoting
// arguments that hold spaces.
func (r Rule) Line(op, chain string) string {
	parts := []string{op, chain}
	for _, a := range r {
		parts = append(parts, quote(a))
	}
	return strings.Join(parts, " ")
}

func quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\"'\\") {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// splitRule splits one line of `iptables -S` output into its arguments,
// undoing the quoting of comments.
func splitRule(line string) []string {
	var out []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\\' && inQuote && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case ch == '"':
			inQuote, have = !inQuote, true
		case (ch == ' ' || ch == '\t') && !inQuote:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(ch)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}
