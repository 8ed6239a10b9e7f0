package firewall

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/coreos/go-iptables/iptables"
)

// Report is what Check found.
type Report struct {
	// Diff is a unified-style difference from the live rules ("-") to the
	// planned ones ("+"); empty when they match. Generation chains are
	// shown as EDGEFLEET: any generation number matches.
	Diff []string
	// Chains are the live generation chains per family ("IPv4: EDGEFLEET-3").
	Chains []string
}

// InSync reports whether the live rules are exactly the planned ones.
func (r Report) InSync() bool { return len(r.Diff) == 0 }

// Check compares the live rules of both families with the plan for c: the
// jump at position 1 of the hook chain, the generation chain's rules in
// order, and no stale jump or chain of ours.
func (fw *Firewall) Check(c Config) (Report, error) {
	p, err := fw.Plan(c)
	if err != nil {
		return Report{}, err
	}
	return fw.CheckPlan(p)
}

// CheckPlan is Check against a plan already built.
func (fw *Firewall) CheckPlan(p *Plan) (Report, error) {
	var rep Report
	for _, f := range p.Families {
		l, err := fw.read(f.Proto, f.Hook)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", f.Name, err)
		}
		var want, have []string
		want = append(want, Jump("EDGEFLEET", p.owner).Line("-I", f.Hook+" 1"))
		if l.first != "" {
			owner := ""
			for _, j := range l.jumps {
				if j.primary {
					owner = j.owner
				}
			}
			have = append(have, Jump("EDGEFLEET", owner).Line("-I", f.Hook+" 1"))
			rep.Chains = append(rep.Chains, f.Name+": "+l.first)
		}
		for _, j := range l.jumps {
			if !j.primary {
				have = append(have, "# stale jump: "+Rule(j.args).Line("-A", j.chain))
			}
		}
		for _, c := range l.chains {
			if c != l.first {
				have = append(have, "# stale chain: "+c)
			}
		}
		for _, r := range f.Rules {
			want = append(want, r.Line("-A", "EDGEFLEET"))
		}
		have = append(have, l.rules...)
		if d := diff(have, want); d != nil {
			rep.Diff = append(rep.Diff, fmt.Sprintf("--- live %s (%s)", f.Name, cmdName(f.Proto)), fmt.Sprintf("+++ planned %s", f.Name))
			rep.Diff = append(rep.Diff, d...)
		}
	}
	return rep, nil
}

func cmdName(proto iptables.Protocol) string {
	if proto == iptables.ProtocolIPv6 {
		return "ip6tables"
	}
	return "iptables"
}

// diff returns a line diff of a → b (" " same, "-" only in a, "+" only in
// b), or nil when they are equal. Rule sets are small: plain LCS.
func diff(a, b []string) []string {
	if strings.Join(a, "\n") == strings.Join(b, "\n") && len(a) == len(b) {
		return nil
	}
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out = append(out, "  "+a[i])
			i++
			j++
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			out = append(out, "+ "+b[j])
			j++
		default:
			out = append(out, "- "+a[i])
			i++
		}
	}
	return out
}

// Sources are the addresses the live rules of the hook chain let in: the
// -s of every edge rule (tagged "edgefleet: edge …") of the chain its
// rule 1 jumps to, both families (a family without our DOCKER-USER jump is
// read from INPUT, where Plan puts it then); none when nothing of ours is
// hooked.
func (fw *Firewall) Sources(hook string) ([]netip.Addr, error) {
	m, err := fw.SourceNames(hook)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, func(x, y netip.Addr) int { return x.Compare(y) })
	return out, nil
}

// SourceNames is Sources with the edge name each rule's comment gives.
func (fw *Firewall) SourceNames(hook string) (map[netip.Addr]string, error) {
	if hook == "" {
		hook = fw.hook
	}
	out := map[netip.Addr]string{}
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		l, err := fw.read(proto, hook)
		if err == nil && l.first == "" && hook == DockerUser {
			// dockerd without ip6tables: Plan hooks IPv6 into INPUT.
			l, err = fw.read(proto, Input)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cmdName(proto), err)
		}
		for _, line := range l.rules {
			args := splitRule(line)
			name := ""
			for i := 0; i+1 < len(args); i++ {
				if args[i] == "--comment" {
					if rest, ok := strings.CutPrefix(args[i+1], commentEdgePrefix); ok {
						name, _, _ = strings.Cut(rest, " port ")
					}
				}
			}
			if name == "" {
				continue
			}
			for i := 0; i+1 < len(args); i++ {
				if args[i] == "-s" {
					if p, err := netip.ParsePrefix(args[i+1]); err == nil && p.IsSingleIP() {
						out[p.Addr()] = name
					} else if a, err := netip.ParseAddr(args[i+1]); err == nil {
						out[a] = name
					}
				}
			}
		}
	}
	return out, nil
}
