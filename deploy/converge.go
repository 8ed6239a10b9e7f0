package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/internal/clock"
	"github.com/miekg/dns"
)

// DNSClient is the authoritative server as convergence sees it
// (*Publisher).
type DNSClient interface {
	Read(ctx context.Context) (RRSet, error)
	// Check proves the key may update the name, changing nothing.
	Check(ctx context.Context) error
	Apply(ctx context.Context, c Change) error
}

var _ DNSClient = (*Publisher)(nil)

// Firewall is the origin host's firewall as convergence sees it.
type Firewall interface {
	// Diff is the rule-level difference from the live rules to those
	// letting in exactly these edges ("-" live only, "+" planned only);
	// empty when they match. Its error is the one Allow would fail with.
	Diff(edges []Edge) ([]string, error)
	// Allow makes the live rules let in exactly these edges; undo puts
	// back the rules as they were (nil when nothing changed).
	Allow(edges []Edge) (undo func() error, err error)
	// Allowed are the source addresses the live rules let in.
	Allowed() (map[netip.Addr]bool, error)
	// Sources are the same addresses, each with the edge name its rule
	// carries.
	Sources() (map[netip.Addr]string, error)
}

// ProbeResult is one end-to-end probe through an edge.
type ProbeResult struct {
	OK          bool
	HandshakeMS float64 // full TLS handshake through the edge to the origin
	Error       string
}

// ProbeFunc probes addr (ip:port) end to end: a full TLS handshake through
// the edge to the origin and one LDAP round trip (probe.Probe).
type ProbeFunc func(ctx context.Context, addr string) ProbeResult

// ConnsFunc reads an edge's active connections from its metrics endpoint.
type ConnsFunc func(ctx context.Context, metrics string) (int, error)

// Converger brings the live state (DNS, firewall) to the inventory in the
// one safe order (docs/dns-deploy.md), keeping its progress in the state
// file. It plans first (Plan: the list of steps, which --dry-run prints),
// then runs the steps.
type Converger struct {
	Config    Config
	StatePath string
	DNS       DNSClient
	Firewall  Firewall // nil: no firewall steps (development, the demo)
	Probe     ProbeFunc
	Conns     ConnsFunc // nil: edges are waited for drain_timeout
	// Slack is added to the TTL a removed edge waits for (resolvers that
	// fetched the record just before it left).
	Slack time.Duration
	// DryRun prints the plan and changes nothing.
	DryRun bool
	// Locked says the caller holds the state lock (LockState) already.
	Locked bool
	// Defer leaves a withdrawn edge whose resolver wait (TTL + slack) is
	// not over let in by the firewall, for a later run, instead of
	// waiting for it (fleet watch: its checks go on meanwhile). Without
	// it a run waits for it and drops it, as it does a removed edge.
	Defer bool
	// BeforePublish, if non-nil, runs once every new edge passed its
	// probe, before the first DNS change: rotate writes fleet.yaml there,
	// so that a rotation that fails before leaves it as it was.
	BeforePublish func() error
	// Trusted is the origin's front.trusted_edges, when known (nil: not
	// checked): a new edge outside it is warned about before step 1, since
	// the origin would not honour its PROXY headers. TrustedFrom names
	// where it was read.
	Trusted     []netip.Prefix
	TrustedFrom string
	// Out receives the progress lines.
	Out io.Writer
	// Now, if non-nil, is used instead of time.Now (internal/clock): the
	// clock of the state's timestamps and of the waits' deadlines. The
	// waits themselves run on the runtime's clock.
	Now func() time.Time
	// Every is how often a wait prints its progress (5 s when zero).
	Every time.Duration
}

func (c *Converger) now() time.Time {
	return clock.Now(c.Now)
}

func (c *Converger) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Converger) printf(format string, args ...any) {
	if c.Out != nil {
		fmt.Fprintf(c.Out, format+"\n", args...)
	}
}

func (c *Converger) every() time.Duration {
	if c.Every > 0 {
		return c.Every
	}
	return 5 * time.Second
}

// ErrProbe is returned (wrapped) when a new edge failed its probe: only
// the firewall step was done.
var ErrProbe = errors.New("end-to-end probe failed")

// ErrRegression is returned (wrapped) when an edge that got through
// before a firewall change no longer does after it: the previous rules
// are restored.
var ErrRegression = errors.New("firewall change broke a working edge")

// Reconcile brings the state up to date with the inventory, the live DNS
// set and, when known (non-nil), the sources the live firewall lets in
// with the names their rules carry: inventory edges already published are
// active, others new (or failed); an edge that left the inventory after
// being published is draining. Every address live in DNS or the firewall
// that neither the inventory nor the state names drains too, under the
// name its firewall rule gives or "unlisted-<address>": with the state
// lost, it still leaves by the safe order. A draining entry whose
// addresses are neither in DNS nor let in by the firewall is forgotten:
// nothing can reach the origin through it (a state of another run, a run
// killed after its last firewall step).
func Reconcile(cfg Config, st *State, live RRSet, fw map[netip.Addr]string) {
	listed := map[netip.Addr]bool{}
	for _, e := range cfg.Edges {
		for _, a := range e.Addrs() {
			listed[a] = true
		}
	}
	adoptUnknown(cfg, st, live, fw, listed)
	forgetReturned(cfg, st, listed)
	for _, e := range cfg.Edges {
		reconcileListed(cfg, st, live, e)
	}
	retireUnlisted(cfg, st, live, fw)
}

// adoptUnknown gives every address live in DNS or the firewall that
// neither the inventory nor the state names a draining entry of its own.
func adoptUnknown(cfg Config, st *State, live RRSet, fw map[netip.Addr]string, listed map[netip.Addr]bool) {
	known := st.Names()
	unknown := map[string]string{} // base name → the entry made for it
	fwAddrs := slices.Collect(maps.Keys(fw))
	sortAddrs(fwAddrs)
	for _, a := range slices.Concat(live.Addrs(), fwAddrs) {
		if listed[a] {
			continue
		}
		if _, ok := known[a]; ok {
			continue
		}
		base := fw[a]
		if !edgeName.MatchString(base) || len(base) > 40 {
			base = "unlisted-" + strings.ReplaceAll(a.String(), ":", "-")
		} else if _, listed := cfg.Edge(base); listed {
			base += ".old" // the edge's old address, as a re-addressing names it
		}
		name, ok := unknown[base]
		if s := st.Edges[name]; !ok || (a.Is4() && s.IPv4 != "") || (a.Is6() && s.IPv6 != "") {
			name = freeName(st, cfg, base)
			unknown[base] = name
			st.Edges[name] = &EdgeState{State: StateDraining}
		}
		if a.Is4() {
			st.Edges[name].IPv4 = a.String()
		} else {
			st.Edges[name].IPv6 = a.String()
		}
		known[a] = name
	}
}

// forgetReturned drops an entry no longer listed whose every address is
// an inventory edge's again (an edge moved back while its old address
// drained): nothing to wait for or to drop.
func forgetReturned(cfg Config, st *State, listed map[netip.Addr]bool) {
	for name, s := range st.Edges {
		if _, ok := cfg.Edge(name); ok {
			continue
		}
		if addrs := s.Edge(name).Addrs(); len(addrs) > 0 && !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return !listed[a] }) {
			delete(st.Edges, name)
		}
	}
}

// reconcileListed brings inventory edge e's entry up to date: a
// re-addressed edge's old addresses drain under another name; a published
// edge is active, one someone removed from DNS new again.
func reconcileListed(cfg Config, st *State, live RRSet, e Edge) {
	s := st.Edges[e.Name]
	if s != nil && (s.IPv4 != e.IPv4 || s.IPv6 != e.IPv6) && (s.State == StateActive || s.State == StateDraining) {
		old := *s
		old.State, old.LeftDNS = StateDraining, time.Time{}
		if old.IPv4 == e.IPv4 {
			old.IPv4 = ""
		}
		if old.IPv6 == e.IPv6 {
			old.IPv6 = ""
		}
		if old.IPv4 != "" || old.IPv6 != "" {
			st.Edges[freeName(st, cfg, e.Name+".old")] = &old
		}
		s = nil
	}
	if s == nil || s.State == StateDraining {
		s = &EdgeState{State: StateNew}
		st.Edges[e.Name] = s
	}
	s.IPv4, s.IPv6, s.Metrics = e.IPv4, e.IPv6, e.Metrics
	published := true
	for _, a := range e.Addrs() {
		published = published && live.Has(a)
	}
	switch {
	case published:
		s.State, s.Error = StateActive, ""
	case s.State == StateActive:
		s.State = StateNew // someone removed it: probe and publish again
	}
}

// retireUnlisted makes every published entry the inventory no longer
// lists drain, and forgets one that nothing can reach the origin through
// (never published, or neither in DNS nor let in by a known firewall).
func retireUnlisted(cfg Config, st *State, live RRSet, fw map[netip.Addr]string) {
	for name, s := range st.Edges {
		if _, ok := cfg.Edge(name); ok {
			continue
		}
		addrs := s.Edge(name).Addrs()
		inDNS := slices.ContainsFunc(addrs, live.Has)
		switch s.State {
		case StateNew, StateFailed:
			if !inDNS {
				delete(st.Edges, name) // never published: the firewall simply forgets it
				continue
			}
			s.State = StateDraining
		case StateActive:
			s.State = StateDraining
		}
		if fw != nil && !inDNS && !slices.ContainsFunc(addrs, func(a netip.Addr) bool { _, ok := fw[a]; return ok }) {
			delete(st.Edges, name)
		}
	}
}

// freeName is base, or base with a number ("e1.old", "e1.old2"…), that
// neither the state nor the inventory uses, cut to fit an edge name: each
// old address keeps its own entry and its own wait.
func freeName(st *State, cfg Config, base string) string {
	used := func(n string) bool {
		_, listed := cfg.Edge(n)
		return listed || st.Edges[n] != nil
	}
	for i := 1; ; i++ {
		suffix := ""
		if i > 1 {
			suffix = strconv.Itoa(i)
		}
		name := base
		if len(name)+len(suffix) > maxEdgeName {
			name = name[:maxEdgeName-len(suffix)]
		}
		name += suffix
		if !used(name) {
			return name
		}
	}
}

// Step is one action of a convergence: Plan says what it would do (what
// --dry-run prints; empty for bookkeeping), Run does it and prints its
// progress.
type Step struct {
	Plan string
	run  func(ctx context.Context) error
}

// Run does the step.
func (s Step) Run(ctx context.Context) error { return s.run(ctx) }

// run is what the steps of one convergence share.
type run struct {
	st     *State
	live   RRSet
	dns    DNSPlan
	failed []string
}

// Run converges: 1 firewall allows the new edges, 2 each new edge is
// probed end to end, 3 DNS adds the new edges, 4 DNS removes the edges no
// longer listed, 5 a removed edge waits for resolver caches and its
// drain, 6 the firewall drops it. Each step is saved in the state file, so
// a run that is interrupted resumes where it stopped. With DryRun the plan
// is printed and nothing changes.
func (c *Converger) Run(ctx context.Context) error {
	if !c.DryRun && !c.Locked {
		unlock, err := LockState(c.StatePath)
		if err != nil {
			return err
		}
		defer unlock()
	}
	if !c.DryRun {
		RemoveTemps(c.StatePath) // of a run killed while saving; we hold the lock
	}
	steps, r, err := c.plan(ctx)
	if err != nil {
		return err
	}
	if c.DryRun {
		for _, s := range steps {
			if s.Plan != "" {
				c.printf("%s", s.Plan)
			}
		}
		return nil
	}
	// A key the server refuses would stop the run at step 3, after the
	// firewall changed: find out before.
	if len(r.dns.Changes) > 0 {
		if err := c.DNS.Check(ctx); err != nil {
			return err
		}
	}
	if err := r.st.Save(c.StatePath); err != nil {
		return err
	}
	for _, s := range steps {
		if err := s.Run(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (c *Converger) plan(ctx context.Context) ([]Step, *run, error) {
	cfg := c.Config
	st, serving, live, fwLive, err := c.observe(ctx)
	if err != nil {
		return nil, nil, err
	}
	leaving := c.leaving(cfg, st, fwLive)
	for _, name := range st.Sorted() {
		if s := st.Edges[name]; s.State == StateDraining && !s.LeftDNS.IsZero() {
			c.printf("resuming: %s left DNS at %s", name, s.LeftDNS.UTC().Format(time.RFC3339))
		}
	}
	dnsPlan, err := PlanDNS(cfg.Name, live, serving.Edges, uint32(cfg.TTL), st.Names())
	if err != nil {
		return nil, nil, err
	}
	r := &run{st: st, live: live, dns: dnsPlan}
	save := func() error { return st.Save(c.StatePath) }
	steps := c.trustSteps(st)

	// 1. The firewall allows every listed edge (but the withdrawn ones it
	// dropped), and still the draining ones.
	allow := Allowed(cfg, st)
	var draining []string
	for _, name := range st.Sorted() {
		if s := st.Edges[name]; s.State == StateDraining {
			allow = append(allow, s.Edge(name))
			draining = append(draining, name)
		}
	}
	first, err := c.allowStep(ctx, "1/6", allow, r)
	if err != nil {
		return nil, nil, err
	}
	steps = append(steps, first)
	// 2. Each new edge is probed end to end.
	steps = append(steps, c.probeSteps(serving, r, save)...)
	// 3 and 4. One UPDATE per change, additions first, each read back.
	steps = append(steps, c.dnsSteps(r, save)...)
	// 5 and 6. Removed and withdrawn edges wait, then leave the firewall.
	leave, err := c.leaveSteps(ctx, r, draining, leaving, save)
	if err != nil {
		return nil, nil, err
	}
	steps = append(steps, leave...)
	steps = append(steps, Step{run: func(context.Context) error {
		if err := save(); err != nil {
			return err
		}
		if c.Firewall == nil {
			c.printf("done: %s answers %s", dnsPlan.Name, addrList(dnsPlan.After))
		} else {
			c.printf("done: %s answers %s; the firewall allows %s", dnsPlan.Name, addrList(dnsPlan.After), edgeNames(Allowed(cfg, st)))
		}
		return nil
	}})
	return steps, r, nil
}

// observe reads what the plan starts from: the state (adopted for this
// inventory), the edges to publish, the live DNS set and, with a
// firewall, the sources it lets in; the state is then reconciled with
// them. An edge fleet watch withdrew stays out of DNS until the watch
// restores it (serving is taken before Reconcile); the firewall drops it
// after its wait, as a removed edge, and lets it in again while the watch
// rechecks it.
func (c *Converger) observe(ctx context.Context) (st *State, serving Config, live RRSet, fw map[netip.Addr]string, err error) {
	if st, err = LoadState(c.StatePath); err != nil {
		return
	}
	if err = st.Adopt(c.Config, c.StatePath); err != nil {
		return
	}
	serving = Serving(c.Config, st)
	if live, err = c.DNS.Read(ctx); err != nil {
		return
	}
	if c.Firewall != nil {
		if fw, err = c.Firewall.Sources(); err != nil {
			err = fmt.Errorf("firewall: %w", err)
			return
		}
	}
	Reconcile(c.Config, st, live, fw)
	return
}

// trustSteps warn about edges the origin's front does not trust.
func (c *Converger) trustSteps(st *State) []Step {
	if c.Trusted == nil {
		return nil
	}
	u := Untrusted(c.Config.Edges, st, c.Trusted)
	if len(u) == 0 {
		return nil
	}
	line := fmt.Sprintf("warning: %s outside front.trusted_edges of %s: the origin will not honour its PROXY headers (add it there and reload the origin first)", strings.Join(u, ", "), c.TrustedFrom)
	return []Step{{Plan: line, run: func(context.Context) error { c.printf("%s", line); return nil }}}
}

// probeSteps are step 2: each serving edge not active yet is probed end
// to end; a failure stops the run before DNS changes.
func (c *Converger) probeSteps(serving Config, r *run, save func() error) []Step {
	var steps []Step
	st := r.st
	for _, e := range serving.Edges {
		if st.Edges[e.Name].State == StateActive {
			continue
		}
		steps = append(steps, Step{
			Plan: fmt.Sprintf("step 2/6 probe: would probe %s end to end (%s)", e.Name, c.probeAddrs(e)),
			run:  func(ctx context.Context) error { c.probeNew(ctx, e, r); return nil },
		})
	}
	return append(steps, Step{run: func(context.Context) error {
		if len(r.failed) > 0 {
			if err := save(); err != nil {
				return err
			}
			allowed := "the firewall allows it; "
			if c.Firewall == nil {
				allowed = ""
			}
			return fmt.Errorf("%w: %s not published (%sfix it and rerun): %s", ErrProbe,
				strings.Join(r.failed, ", "), allowed, st.Edges[r.failed[0]].Error)
		}
		if c.BeforePublish != nil {
			return c.BeforePublish()
		}
		return nil
	}})
}

// dnsSteps are steps 3 and 4: one UPDATE per change of r.dns, additions
// first, each read back and saved; then every edge's DNS marks.
func (c *Converger) dnsSteps(r *run, save func() error) []Step {
	var steps []Step
	cfg, st, dnsPlan := c.Config, r.st, r.dns
	if len(dnsPlan.Changes) == 0 {
		line := fmt.Sprintf("step 3/6 dns: %s in sync: %s", dnsPlan.Name, addrList(dnsPlan.After))
		steps = append(steps, Step{Plan: line, run: func(context.Context) error { c.printf("%s", line); return nil }})
	}
	for _, ch := range dnsPlan.Changes {
		step := "3/6"
		if ch.Op == OpRemove {
			step = "4/6"
		}
		steps = append(steps, Step{
			Plan: fmt.Sprintf("step %s dns: would %s", step, ch.Describe()),
			run: func(ctx context.Context) error {
				if err := ApplyChange(ctx, c.DNS, cfg, st, &r.live, dnsPlan, ch, c.now()); err != nil {
					return err
				}
				c.printf("step %s dns: %s, read back", step, ch.Describe())
				return save()
			},
		})
	}
	return append(steps, Step{run: func(context.Context) error {
		for _, name := range st.Sorted() {
			markDNS(st, name, r.live, dnsPlan, uint32(cfg.TTL), c.now())
		}
		return save()
	}})
}

// leaveSteps are steps 5 and 6 for the draining edges and the withdrawn
// ones leaving: each waits for resolver caches and its drain, then the
// firewall drops them all; the draining ones are forgotten, the withdrawn
// ones recorded as out.
func (c *Converger) leaveSteps(ctx context.Context, r *run, draining, leaving []string, save func() error) ([]Step, error) {
	cfg, st, live, dnsPlan := c.Config, r.st, r.live, r.dns
	var steps []Step
	// 5. Each waits for resolver caches and its drain.
	for _, name := range draining {
		s := st.Edges[name]
		steps = append(steps, Step{
			Plan: fmt.Sprintf("step 5/6 wait: would wait for %s: %s, then its drain (up to %v)", name, c.cacheWhy(s, st, live, dnsPlan), cfg.DrainTimeout),
			run:  func(ctx context.Context) error { return c.wait(ctx, name, s, st) },
		})
	}
	for _, name := range leaving {
		steps = append(steps, Step{
			Plan: fmt.Sprintf("step 5/6 wait: would wait for %s (withdrawn): %s, then its drain (up to %v)", name, c.cacheWhy(c.withdrawnState(cfg, st, name), st, live, dnsPlan), cfg.DrainTimeout),
			// Built when it runs: step 4 may just have recorded when it left DNS.
			run: func(ctx context.Context) error { return c.wait(ctx, name, c.withdrawnState(cfg, st, name), st) },
		})
	}

	// 6. The firewall drops them.
	if len(draining)+len(leaving) > 0 {
		keep := slices.DeleteFunc(Allowed(cfg, st), func(e Edge) bool { return slices.Contains(leaving, e.Name) })
		last, err := c.allowStep(ctx, "6/6", keep, r)
		if err != nil {
			return nil, err
		}
		run := last.run
		last.run = func(ctx context.Context) error {
			if err := run(ctx); err != nil {
				return err
			}
			for _, name := range draining {
				delete(st.Edges, name)
			}
			for _, name := range leaving {
				st.firewalledOut(name, cfg.Watch.Interval, c.now())
				c.printf("step 6/6 firewall: %s (withdrawn) is out; fleet watch rechecks it from %s", name, st.Withdrawn[name].NextCheck.UTC().Format(time.RFC3339))
			}
			return save()
		}
		steps = append(steps, last)
	}
	return steps, nil
}

// probeNew probes every address of a new edge, recording a failure in the
// state and in r.failed.
func (c *Converger) probeNew(ctx context.Context, e Edge, r *run) {
	s := r.st.Edges[e.Name]
	// New until published, even once probed: a rerun probes again.
	s.State, s.Error = StateNew, ""
	for _, a := range e.Addrs() {
		addr := net.JoinHostPort(a.String(), strconv.Itoa(c.Config.Probe.Port))
		res := c.Probe(ctx, addr)
		if !res.OK {
			s.State, s.Error = StateFailed, res.Error
			c.printf("step 2/6 probe: %s %s failed: %s", e.Name, addr, res.Error)
			r.failed = append(r.failed, e.Name)
			return
		}
		c.printf("step 2/6 probe: %s %s ok, TLS handshake %.1f ms", e.Name, addr, res.HandshakeMS)
	}
}

func (c *Converger) probeAddrs(e Edge) string {
	var s []string
	for _, a := range e.Addrs() {
		s = append(s, net.JoinHostPort(a.String(), strconv.Itoa(c.Config.Probe.Port)))
	}
	return strings.Join(s, ", ")
}

func edgeNames(edges []Edge) string {
	var s []string
	for _, e := range edges {
		s = append(s, e.Name)
	}
	return strings.Join(s, " ")
}

// ApplyChange sends one UPDATE of plan, and records in the state what it
// did: the TTL a rewrite replaced (resolvers may hold the old records that
// long), an edge published (active), an edge gone from DNS (draining, from
// now on). live is kept as the server now answers.
func ApplyChange(ctx context.Context, d DNSClient, cfg Config, st *State, live *RRSet, plan DNSPlan, ch Change, now time.Time) error {
	if err := d.Apply(ctx, ch); err != nil {
		return err
	}
	switch ch.Op {
	case OpAdd:
		live.add(ch.Addr)
	case OpRemove:
		live.remove(ch.Addr)
	case OpTTL:
		st.RecordTTL(live.TTLOf(ch.Type), now)
		if ch.Type == dns.TypeAAAA {
			live.TTLAAAA = ch.TTL
		} else {
			live.TTLA = ch.TTL
		}
	}
	if name, ok := st.Names()[ch.Addr]; ok && ch.Op != OpTTL {
		markDNS(st, name, *live, plan, uint32(cfg.TTL), now)
	}
	return nil
}

// markDNS records an edge's DNS progress: published (active), or gone
// from DNS (draining, from now on, with the TTL resolvers may hold it).
func markDNS(st *State, name string, live RRSet, plan DNSPlan, ttl uint32, now time.Time) {
	s := st.Edges[name]
	addrs := s.Edge(name).Addrs()
	held := max(ttl, live.TTLA, live.TTLAAAA, plan.beforeTTL)
	if _, ok := st.Withdrawn[name]; ok && !slices.ContainsFunc(addrs, live.Has) {
		st.leftDNS(name, held, now)
	}
	switch {
	case s.State == StateNew && !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return !live.Has(a) }):
		s.State = StateActive
	case s.State == StateDraining && s.LeftDNS.IsZero() && !slices.ContainsFunc(addrs, live.Has):
		s.LeftDNS = now
		s.TTL = held
	}
}

// allowStep is a firewall step allowing exactly edges: its plan shows the
// rule-level difference from the live rules.
func (c *Converger) allowStep(ctx context.Context, step string, edges []Edge, r *run) (Step, error) {
	if c.Firewall == nil {
		line := fmt.Sprintf("step %s firewall: skipped (no firewall)", step)
		return Step{Plan: line, run: func(context.Context) error { c.printf("%s", line); return nil }}, nil
	}
	d, err := c.Firewall.Diff(edges)
	if err != nil {
		return Step{}, fmt.Errorf("firewall: %w", err)
	}
	plan := fmt.Sprintf("step %s firewall: would allow exactly %s", step, edgeNames(edges))
	if len(d) == 0 {
		plan += " (the live rules already do)"
	} else {
		plan += "; the live rules would change so:\n  " + strings.Join(d, "\n  ")
	}
	return Step{Plan: plan, run: func(ctx context.Context) error { return c.allow(ctx, step, edges, r.st) }}, nil
}

// allow runs a firewall step, printing what it does. The edges that get
// through before the change (published or draining ones whose probe
// passes) are probed again after it; one that stopped is a regression:
// the previous rules are put back and the run fails.
func (c *Converger) allow(ctx context.Context, step string, edges []Edge, st *State) error {
	var d, hosts []string // hosts: the origin hosts this step changes, in a pool
	var err error
	if p, ok := c.Firewall.(Pool); ok {
		d, hosts, err = p.diff(edges)
	} else {
		d, err = c.Firewall.Diff(edges)
	}
	if err != nil {
		return fmt.Errorf("firewall: %w", err)
	}
	if len(d) == 0 {
		c.printf("step %s firewall: in sync, allowing %s%s", step, edgeNames(edges), c.onHosts(nil))
		return nil
	}
	var probed []Edge
	for _, e := range edges {
		if s := st.Edges[e.Name]; s != nil && (s.State == StateActive || s.State == StateDraining) {
			probed = append(probed, e)
		}
	}
	working := Working(ctx, c.Probe, c.Config.Probe.Port, probed)
	undo, err := c.Firewall.Allow(edges)
	if err != nil {
		return fmt.Errorf("firewall: %w", err)
	}
	c.printf("step %s firewall: applied, allowing %s%s", step, edgeNames(edges), c.onHosts(hosts))
	err = Regressed(ctx, c.Probe, working)
	if err == nil || undo == nil {
		return err
	}
	if uerr := undo(); uerr != nil {
		return fmt.Errorf("%w; restoring the previous rules failed too: %w", err, uerr)
	}
	c.printf("step %s firewall: the previous rules are restored", step)
	return fmt.Errorf("%w: the previous rules are restored", err)
}

// onHosts is what a firewall step line says of the origin hosts, when the
// firewall is a pool of more than one: " (changed on a, b; c already
// did)", " (on every origin host)" when it changed none. One host: "".
func (c *Converger) onHosts(changed []string) string {
	p, ok := c.Firewall.(Pool)
	if !ok || len(p) < 2 {
		return ""
	}
	if len(changed) == 0 {
		return " (on every origin host)"
	}
	var same []string
	for _, h := range p {
		if !slices.Contains(changed, h.Name) {
			same = append(same, h.Name)
		}
	}
	out := " (changed on " + strings.Join(changed, ", ")
	if len(same) > 0 {
		out += "; " + strings.Join(same, ", ") + " already did"
	}
	return out + ")"
}

// Working probes every address of edges and returns those that get
// through now ("e2 10.77.0.12:636"), for Regressed to probe again after a
// firewall change.
func Working(ctx context.Context, probe ProbeFunc, port int, edges []Edge) []string {
	var working []string
	for _, e := range edges {
		for _, a := range e.Addrs() {
			addr := net.JoinHostPort(a.String(), strconv.Itoa(port))
			if probe(ctx, addr).OK {
				working = append(working, e.Name+" "+addr)
			}
		}
	}
	return working
}

// Regressed probes the working addresses again: an error (ErrRegression)
// names those that no longer get through.
func Regressed(ctx context.Context, probe ProbeFunc, working []string) error {
	var broken []string
	for _, w := range working {
		_, addr, _ := strings.Cut(w, " ")
		if r := probe(ctx, addr); !r.OK {
			broken = append(broken, w+": "+r.Error)
		}
	}
	if len(broken) == 0 {
		return nil
	}
	return fmt.Errorf("%w: after the change %s no longer gets through (check origin.interface and origin.address)", ErrRegression, strings.Join(broken, "; "))
}

// cached is until when resolvers may hold a removed edge's records, and
// why: one TTL after it left DNS, or later when a higher TTL its records
// had was replaced shortly before (the copies fetched then are held for
// that TTL), plus slack.
func (c *Converger) cached(s *EdgeState, st *State, ttl uint32) (time.Time, string) {
	left := s.LeftDNS
	if left.IsZero() {
		// Not yet gone (a dry run), or [unexpected] an address of it is
		// still published under another edge's name: count from now,
		// never from the zero time.
		left = c.now()
	}
	return st.cachedUntil(left, ttl, c.Slack)
}

// cachedUntil is cached for records that left DNS at left with TTL ttl.
func (st *State) cachedUntil(left time.Time, ttl uint32, slack time.Duration) (time.Time, string) {
	d := time.Duration(ttl) * time.Second
	until, why := left.Add(d), fmt.Sprintf("TTL %v", d)
	for _, ch := range st.TTLChanges {
		if !ch.Replaced.After(left) && ch.Until().After(until) {
			until = ch.Until()
			why = fmt.Sprintf("the TTL %v its records had until %s", time.Duration(ch.TTL)*time.Second, ch.Replaced.UTC().Format(time.RFC3339))
		}
	}
	return until.Add(slack), why + fmt.Sprintf(" + slack %v", slack)
}

// leaving are the withdrawn edges this run waits for and drops from the
// firewall: every one still leaving, or with Defer those whose resolver
// wait is over. One past its wait that the live rules no longer let in
// was dropped by a run killed before it saved: it is recorded as out.
func (c *Converger) leaving(cfg Config, st *State, fw map[netip.Addr]string) []string {
	due := DropDue(cfg, st, c.Slack, c.now())
	var names []string
	for _, e := range cfg.Edges {
		if !st.IsWithdrawn(e) || st.Withdrawn[e.Name].Phase() != PhaseLeaving {
			continue
		}
		isDue := slices.Contains(due, e.Name)
		if fw != nil && isDue && !slices.ContainsFunc(e.Addrs(), func(a netip.Addr) bool { _, ok := fw[a]; return ok }) {
			st.firewalledOut(e.Name, cfg.Watch.Interval, c.now())
			continue
		}
		if isDue || !c.Defer {
			names = append(names, e.Name)
		}
	}
	return names
}

// withdrawnState is withdrawn edge name as wait sees a removed edge.
func (c *Converger) withdrawnState(cfg Config, st *State, name string) *EdgeState {
	e, _ := cfg.Edge(name)
	w := st.Withdrawn[name]
	return &EdgeState{IPv4: e.IPv4, IPv6: e.IPv6, Metrics: e.Metrics, State: StateDraining, LeftDNS: w.LeftDNS, TTL: w.TTL}
}

// cacheWhy is the TTL wait as the plan states it.
func (c *Converger) cacheWhy(s *EdgeState, st *State, live RRSet, plan DNSPlan) string {
	ttl := max(s.TTL, uint32(c.Config.TTL))
	if s.LeftDNS.IsZero() {
		ttl = max(ttl, live.TTLA, live.TTLAAAA, plan.beforeTTL)
	}
	_, why := c.cached(s, st, ttl)
	return why
}

// wait holds a removed edge until resolvers can no longer hold its records
// (cached), then until its active connections reach zero, its metrics
// endpoint refuses connections (the edge is down: nothing left to drain),
// or drain_timeout passes, printing progress every c.Every.
func (c *Converger) wait(ctx context.Context, name string, s *EdgeState, st *State) error {
	cached, why := c.cached(s, st, max(s.TTL, uint32(c.Config.TTL)))
	every := c.every()
	for {
		left := cached.Sub(c.now())
		if left <= 0 {
			break
		}
		c.printf("step 5/6 wait: %s left DNS at %s; resolvers may hold it %s more (%s)",
			name, s.LeftDNS.UTC().Format(time.RFC3339), roundUp(left), why)
		if err := c.sleep(ctx, min(left, every)); err != nil {
			return err
		}
	}
	deadline := cached.Add(c.Config.DrainTimeout)
	if s.Metrics == "" || c.Conns == nil {
		for {
			left := deadline.Sub(c.now())
			if left <= 0 {
				c.printf("step 5/6 drain: %s: drain_timeout passed (no metrics endpoint to read its connections from)", name)
				return nil
			}
			c.printf("step 5/6 drain: %s has no metrics endpoint: waiting drain_timeout (%s left)", name, roundUp(left))
			if err := c.sleep(ctx, min(left, every)); err != nil {
				return err
			}
		}
	}
	poll := min(every, time.Second)
	var printed time.Time
	for {
		n, err := c.Conns(ctx, s.Metrics)
		now := c.now()
		left := deadline.Sub(now)
		switch {
		case err == nil && n == 0:
			c.printf("step 5/6 drain: %s has no active connection", name)
			return nil
		case errors.Is(err, syscall.ECONNREFUSED):
			c.printf("step 5/6 drain: %s: its metrics endpoint refuses connections: the edge is down, nothing left to drain", name)
			return nil
		case left <= 0:
			if err != nil {
				c.printf("step 5/6 drain: %s: drain_timeout passed (%v)", name, err)
			} else {
				c.printf("step 5/6 drain: %s: drain_timeout passed with %s", name, plural(n, "active connection"))
			}
			return nil
		case !printed.IsZero() && now.Sub(printed) < every:
		case err != nil:
			printed = now
			c.printf("step 5/6 drain: %s: %v; waiting up to %s more", name, err, roundUp(left))
		default:
			printed = now
			c.printf("step 5/6 drain: %s has %s; waiting up to %s more", name, plural(n, "active connection"), roundUp(left))
		}
		if err := c.sleep(ctx, min(left, poll)); err != nil {
			return err
		}
	}
}

// roundUp is d in whole seconds, rounded up: a wait of 0.4 s is "1s more",
// never "0s more".
func roundUp(d time.Duration) time.Duration {
	return time.Duration(math.Ceil(d.Seconds())) * time.Second
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func (s *RRSet) add(a netip.Addr) {
	if s.Has(a) {
		return
	}
	if a.Is4() {
		s.A = append(s.A, a)
	} else {
		s.AAAA = append(s.AAAA, a)
	}
}

func (s *RRSet) remove(a netip.Addr) {
	s.A = slices.DeleteFunc(s.A, func(x netip.Addr) bool { return x == a })
	s.AAAA = slices.DeleteFunc(s.AAAA, func(x netip.Addr) bool { return x == a })
}
