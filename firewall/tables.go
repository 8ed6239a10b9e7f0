package firewall

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/coreos/go-iptables/iptables"
	"github.com/edgefleet/edgefleet/internal/sbin"
)

// Backends: iptables comes in two flavours that do not see each other's
// rules. The rules must go where dockerd put its own, or they are never
// consulted.
const (
	BackendNFT    = "nft"
	BackendLegacy = "legacy"
)

// Firewall installs plans through one iptables backend, both families.
type Firewall struct {
	backend string
	hook    string
	v4, v6  *iptables.IPTables
	// prefix of the generation chains; "" is ChainPrefix. Only the test
	// against the machine's real Docker engine sets another one, so that
	// it can neither see nor delete the chains of a real deployment.
	prefix string
}

// Open connects to backend "nft", "legacy", or "auto": the one whose filter
// table holds the DOCKER-USER chain (the backend dockerd uses), else the
// system's default iptables. hook is the chain the rules will hang from.
func Open(backend, hook string) (*Firewall, error) {
	if hook == "" {
		hook = DockerUser
	}
	if backend == "" || backend == "auto" {
		backend = detect(hook)
	}
	if backend != BackendNFT && backend != BackendLegacy {
		return nil, fmt.Errorf("backend %q: want nft, legacy or auto", backend)
	}
	fw := &Firewall{backend: backend, hook: hook}
	var err error
	if fw.v4, err = newTables(backend, iptables.ProtocolIPv4); err != nil {
		return nil, err
	}
	if fw.v6, err = newTables(backend, iptables.ProtocolIPv6); err != nil {
		return nil, err
	}
	return fw, nil
}

// Backend is "nft" or "legacy".
func (fw *Firewall) Backend() string { return fw.backend }

func binary(backend string, proto iptables.Protocol) string {
	if proto == iptables.ProtocolIPv6 {
		return "ip6tables-" + backend
	}
	return "iptables-" + backend
}

func newTables(backend string, proto iptables.Protocol) (*iptables.IPTables, error) {
	path, err := sbin.LookPath(binary(backend, proto))
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w (install iptables)", backend, err)
	}
	ipt, err := iptables.New(iptables.IPFamily(proto), iptables.Path(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ipt, nil
}

// detect picks the backend whose IPv4 filter table has the hook chain
// (DOCKER-USER: where dockerd runs), nft first, else what plain `iptables`
// is. iptables-legacy is only asked when the kernel has a legacy filter
// table in this namespace: running it would otherwise create one (and
// every later iptables-nft call would warn about it).
func detect(hook string) string {
	if hook == DockerUser {
		for _, b := range []string{BackendNFT, BackendLegacy} {
			if b == BackendLegacy && !legacyFilterExists() {
				continue
			}
			ipt, err := newTables(b, iptables.ProtocolIPv4)
			if err != nil {
				continue
			}
			if ok, err := ipt.ChainExists("filter", DockerUser); err == nil && ok {
				return b
			}
		}
	}
	if path, err := sbin.LookPath("iptables"); err == nil {
		if out, err := exec.Command(path, "--version").Output(); err == nil && strings.Contains(string(out), "legacy") {
			return BackendLegacy
		}
	}
	return BackendNFT
}

// legacyFilterExists reads the legacy x_tables of the calling thread's
// network namespace.
func legacyFilterExists() bool {
	b, err := os.ReadFile("/proc/thread-self/net/ip_tables_names")
	if err != nil {
		b, err = os.ReadFile("/proc/net/ip_tables_names")
	}
	return err == nil && slices.Contains(strings.Fields(string(b)), "filter")
}

func (fw *Firewall) tables(proto iptables.Protocol) *iptables.IPTables {
	if proto == iptables.ProtocolIPv6 {
		return fw.v6
	}
	return fw.v4
}

// live is what one family's filter table holds of ours.
type live struct {
	hookExists bool
	chains     []string // our generation chains, oldest first
	jumps      []jump   // rules of the hook chains jumping to one of ours
	first      string   // the chain hook's rule 1 jumps to, if it is ours
	rules      []string // -S lines of the chain `first` (normalised)
}

// jump is one rule jumping to a generation chain.
type jump struct {
	chain   string   // the hook chain it sits in
	pos     int      // its rule number there
	target  string   // EDGEFLEET-n
	args    []string // its -S arguments after "-A chain"
	primary bool     // rule 1 of the plan's hook: the one Apply replaces
	owner   string   // the inventory its comment names ("" for none)
}

// hooks are every chain a jump of ours may sit in (a plan may have moved
// between them).
var hooks = []string{DockerUser, Input}

func (fw *Firewall) read(proto iptables.Protocol, hook string) (live, error) {
	ipt := fw.tables(proto)
	var l live
	chains, err := ipt.ListChains("filter")
	if err != nil {
		return l, fmt.Errorf("list chains: %w", err)
	}
	for _, c := range chains {
		if c == hook {
			l.hookExists = true
		}
		if fw.generation(c) > 0 {
			l.chains = append(l.chains, c)
		}
	}
	sort.Slice(l.chains, func(i, j int) bool { return fw.generation(l.chains[i]) < fw.generation(l.chains[j]) })
	for _, h := range hooks {
		if !slices.Contains(chains, h) {
			continue
		}
		lines, err := ipt.List("filter", h)
		if err != nil {
			return l, fmt.Errorf("list %s: %w", h, err)
		}
		n := 0
		for _, line := range lines {
			args := splitRule(line)
			if len(args) < 2 || args[0] != "-A" {
				continue
			}
			n++
			target := jumpTarget(args)
			if fw.generation(target) == 0 {
				continue
			}
			j := jump{chain: h, pos: n, target: target, args: args[2:], primary: h == hook && n == 1}
			j.owner, _ = jumpOwner(j.args)
			l.jumps = append(l.jumps, j)
			if j.primary {
				l.first = target
			}
		}
	}
	if l.first != "" {
		lines, err := ipt.List("filter", l.first)
		if err != nil {
			return l, fmt.Errorf("list %s: %w", l.first, err)
		}
		for _, line := range lines {
			if args := splitRule(line); len(args) > 0 && args[0] == "-A" {
				l.rules = append(l.rules, Rule(args[2:]).Line("-A", "EDGEFLEET"))
			}
		}
	}
	return l, nil
}

func jumpTarget(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-j" || args[i] == "-g" {
			return args[i+1]
		}
	}
	return ""
}

// generation is n for EDGEFLEET-n, 0 for any other chain name.
func (fw *Firewall) generation(chain string) int {
	s, ok := strings.CutPrefix(chain, orDefault(fw.prefix))
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || strconv.Itoa(n) != s {
		return 0
	}
	return n
}

// Plan builds the next generation's plan for c against the live tables:
// the generation number follows the newest chain of either family, and a
// family whose hook chain is missing is refused (or, with c.Force, left
// out; with c.CreateChain, kept: Apply creates the chain). On a host where
// dockerd runs without ip6tables there is no IPv6 DOCKER-USER: IPv6 to a
// published port is then carried by docker-proxy through INPUT, so the
// IPv6 rules hook into INPUT.
func (fw *Firewall) Plan(c Config) (*Plan, error) {
	if c.Chain == "" {
		c.Chain = fw.hook
	}
	gen := 0
	exists := map[iptables.Protocol]bool{}
	var foreign string
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		l, err := fw.read(proto, c.Chain)
		if err != nil {
			return nil, err
		}
		exists[proto] = l.hookExists
		for _, ch := range l.chains {
			gen = max(gen, fw.generation(ch))
		}
		for _, j := range l.jumps {
			if j.owner != "" && j.owner != c.Owner {
				foreign = j.owner
			}
		}
	}
	p, err := NewPlan(c, gen+1)
	if err != nil {
		return nil, err
	}
	p.prefix = fw.prefix
	var refusals []error
	if foreign != "" {
		msg := fmt.Sprintf("the firewall holds the rules of inventory %q: refusing to replace them with those of %q (one inventory's rules per host)", foreign, displayOwner(c.Owner))
		if !c.Force {
			return nil, errors.New(msg + "; --force replaces them")
		}
		p.Warnings = append(p.Warnings, msg+" (forced)")
	}
	if c.Interface != "" {
		// A typo (eth9) would match no edge's connection: every edge
		// dropped, with rules that look right.
		if _, err := net.InterfaceByName(c.Interface); err != nil {
			msg := fmt.Sprintf("origin.interface: no interface %q on this host (%v): the rules would let no edge in", c.Interface, err)
			if !c.Force {
				return nil, errors.New(msg)
			}
			p.Warnings = append(p.Warnings, msg+" (forced)")
		}
	}
	var kept []Family
	for _, f := range p.Families {
		switch {
		case exists[f.Proto] || c.CreateChain:
		case f.Proto == iptables.ProtocolIPv6 && c.Chain == DockerUser && exists[iptables.ProtocolIPv4]:
			f = p.family(f.Proto, Input)
			p.Warnings = append(p.Warnings, "IPv6: ip6tables has no DOCKER-USER chain (dockerd runs without ip6tables): IPv6 reaches published ports through docker-proxy, so the IPv6 rules hook into INPUT")
		case c.Force:
			p.Warnings = append(p.Warnings, fmt.Sprintf("%s: no %s chain in %s (%s backend): family skipped (forced)", f.Name, c.Chain, binary(fw.backend, f.Proto), fw.backend))
			continue
		default:
			hint := "is dockerd running? "
			if c.Chain != DockerUser {
				hint = ""
			}
			refusals = append(refusals, fmt.Errorf("%s has no %s chain: %srefusing to create it (--create-chain creates it, --force skips the family, --backend picks the other iptables)", binary(fw.backend, f.Proto), c.Chain, hint))
			continue
		}
		kept = append(kept, f)
	}
	if len(refusals) > 0 {
		return nil, errors.Join(refusals...)
	}
	p.Families = kept
	return p, nil
}

// Apply installs p: per family, the generation chain is built completely,
// then the jump at position 1 of the hook chain is replaced by one jumping
// to it (one atomic rule replacement: traffic sees either the old rule set
// or the new one), then the old jumps and chains are deleted. A missing
// hook chain is created only when the plan says so (Config.CreateChain).
func (fw *Firewall) Apply(p *Plan) error {
	if p.prefix != fw.prefix {
		return fmt.Errorf("plan for chains %s… applied through a firewall of %s…", orDefault(p.prefix), orDefault(fw.prefix))
	}
	chain := p.Chain()
	for _, f := range p.Families {
		ipt := fw.tables(f.Proto)
		l, err := fw.read(f.Proto, f.Hook)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		if !l.hookExists {
			if !f.CreateHook {
				return fmt.Errorf("%s: %s has no %s chain: refusing to create it", f.Name, binary(fw.backend, f.Proto), f.Hook)
			}
			if err := ipt.NewChain("filter", f.Hook); err != nil {
				return fmt.Errorf("%s: create %s: %w", f.Name, f.Hook, err)
			}
		}
		if slices.Contains(l.chains, chain) {
			// A leftover of an interrupted apply of the same generation,
			// not referenced (else the generation would be higher).
			if err := fw.dropChain(ipt, chain, l); err != nil {
				return fmt.Errorf("%s: %w", f.Name, err)
			}
		}
		if err := ipt.NewChain("filter", chain); err != nil {
			return fmt.Errorf("%s: create %s: %w", f.Name, chain, err)
		}
		for _, r := range f.Rules {
			if err := ipt.Append("filter", chain, r...); err != nil {
				return fmt.Errorf("%s: append to %s: %w", f.Name, chain, err)
			}
		}
		if l.first != "" {
			err = ipt.Replace("filter", f.Hook, 1, Jump(chain, p.owner)...)
		} else {
			err = ipt.Insert("filter", f.Hook, 1, Jump(chain, p.owner)...)
		}
		if err != nil {
			return fmt.Errorf("%s: jump from %s: %w", f.Name, f.Hook, err)
		}
		if err := fw.cleanup(f.Proto, f.Hook, chain); err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
	}
	return nil
}

// cleanup deletes every jump other than the primary one (rule 1 of hook)
// to keep, and every generation chain other than keep. Jumps are deleted
// by number, highest first, so a duplicate of the primary jump goes and
// the primary stays.
func (fw *Firewall) cleanup(proto iptables.Protocol, hook, keep string) error {
	ipt := fw.tables(proto)
	l, err := fw.read(proto, hook)
	if err != nil {
		return err
	}
	for i := len(l.jumps) - 1; i >= 0; i-- {
		j := l.jumps[i]
		if j.primary && j.target == keep {
			continue
		}
		if err := ipt.DeleteById("filter", j.chain, j.pos); err != nil {
			return fmt.Errorf("delete jump %s: %w", Rule(j.args).Line("-A", j.chain), err)
		}
	}
	for _, c := range l.chains {
		if c == keep {
			continue
		}
		if err := ipt.ClearAndDeleteChain("filter", c); err != nil {
			return fmt.Errorf("delete %s: %w", c, err)
		}
	}
	return nil
}

// dropChain deletes chain and every jump to it.
func (fw *Firewall) dropChain(ipt *iptables.IPTables, chain string, l live) error {
	for i := len(l.jumps) - 1; i >= 0; i-- {
		if j := l.jumps[i]; j.target == chain {
			if err := ipt.DeleteById("filter", j.chain, j.pos); err != nil {
				return err
			}
		}
	}
	return ipt.ClearAndDeleteChain("filter", chain)
}

func displayOwner(owner string) string {
	if owner == "" {
		return "(unnamed)"
	}
	return owner
}

// Foreign returns the owner named by a live jump of ours that is not
// owner ("" when every jump is owner's or names none).
func (fw *Firewall) Foreign(owner string) (string, error) {
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		l, err := fw.read(proto, fw.hook)
		if err != nil {
			return "", fmt.Errorf("%s: %w", cmdName(proto), err)
		}
		for _, j := range l.jumps {
			if j.owner != "" && j.owner != owner {
				return j.owner, nil
			}
		}
	}
	return "", nil
}

// Remove deletes every jump and chain of ours, both families.
func (fw *Firewall) Remove() error {
	var errs []error
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		if err := fw.cleanup(proto, "", ""); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Snapshot is the live rule set of ours as Save read it, for Restore to
// put back: the rules of the chain each family's hook jumps to.
type Snapshot struct {
	plan *Plan // the live rules as a plan (generation set by Restore)
	// bare are the families nothing of ours was hooked into.
	bare []iptables.Protocol
}

// Save reads the live rule set of both families (hooked into the
// firewall's hook chain, or for IPv6 into INPUT where Plan puts it on a
// dockerd without ip6tables).
func (fw *Firewall) Save() (*Snapshot, error) {
	s := &Snapshot{plan: &Plan{prefix: fw.prefix}}
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		hook := fw.hook
		l, err := fw.read(proto, hook)
		if err == nil && l.first == "" && hook == DockerUser {
			hook = Input
			l, err = fw.read(proto, hook)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cmdName(proto), err)
		}
		if l.first == "" {
			s.bare = append(s.bare, proto)
			continue
		}
		f := Family{Name: "IPv4", Proto: proto, Hook: hook}
		if proto == iptables.ProtocolIPv6 {
			f.Name = "IPv6"
		}
		for _, line := range l.rules {
			if args := splitRule(line); len(args) > 2 {
				f.Rules = append(f.Rules, Rule(args[2:]))
			}
		}
		for _, j := range l.jumps {
			if j.primary {
				s.plan.owner = j.owner
			}
		}
		s.plan.Families = append(s.plan.Families, f)
	}
	return s, nil
}

// Restore puts back the rule set s was saved from, as a new generation
// (built completely, then swapped in like any other): a family that had
// nothing of ours gets nothing again.
func (fw *Firewall) Restore(s *Snapshot) error {
	gen := 0
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		l, err := fw.read(proto, fw.hook)
		if err != nil {
			return fmt.Errorf("%s: %w", cmdName(proto), err)
		}
		for _, ch := range l.chains {
			gen = max(gen, fw.generation(ch))
		}
	}
	p := *s.plan
	p.Generation = gen + 1
	var errs []error
	if len(p.Families) > 0 {
		errs = append(errs, fw.Apply(&p))
	}
	for _, proto := range s.bare {
		errs = append(errs, fw.cleanup(proto, "", ""))
	}
	return errors.Join(errs...)
}
