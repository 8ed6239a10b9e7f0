package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/internal/clock"
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
	// Allow makes the live rules let in exactly these edges; it changes
	// nothing (and returns false) when they already do.
	Allow(edges []Edge) (changed bool, err error)
	// Allowed are the source addresses the live rules let in.
	Allowed() (map[netip.Addr]bool, error)
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
// one safe order of docs/architecture.md, keeping its progress in the state file.
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
	// DryRun prints what would be done and changes nothing.
	DryRun bool
	// Locked says the caller holds the state lock (LockState) already.
	Locked bool
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

// ErrProbe is returned (wrapped) when a new edge failed its probe: only
// the firewall step was done.
var ErrProbe = errors.New("end-to-end probe failed")

// Reconcile loads the state file and brings it up to date with the
// inventory and the live DNS set: inventory edges already published are
// active, others new (or failed); an edge that left the inventory after
// being published is draining.
func Reconcile(cfg Config, st *State, live RRSet) {
	// An entry no longer listed whose every address is an inventory
	// edge's again (an edge moved back while its old address drained):
	// nothing to wait for or to drop.
	listed := map[netip.Addr]bool{}
	for _, e := range cfg.Edges {
		for _, a := range e.Addrs() {
			listed[a] = true
		}
	}
	for name, s := range st.Edges {
		if _, ok := cfg.Edge(name); ok {
			continue
		}
		if addrs := s.Edge(name).Addrs(); len(addrs) > 0 && !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return !listed[a] }) {
			delete(st.Edges, name)
		}
	}
	for _, e := range cfg.Edges {
		s := st.Edges[e.Name]
		if s != nil && (s.IPv4 != e.IPv4 || s.IPv6 != e.IPv6) && (s.State == StateActive || s.State == StateDraining) {
			// Re-addressed: the addresses it no longer has drain under
			// another name.
			old := *s
			old.State, old.LeftDNS = StateDraining, time.Time{}
			if old.IPv4 == e.IPv4 {
				old.IPv4 = ""
			}
			if old.IPv6 == e.IPv6 {
				old.IPv6 = ""
			}
			if old.IPv4 != "" || old.IPv6 != "" {
				st.Edges[oldName(st, e.Name)] = &old
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
	for name, s := range st.Edges {
		if _, ok := cfg.Edge(name); ok {
			continue
		}
		inDNS := slices.ContainsFunc(s.Edge(name).Addrs(), live.Has)
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
	}
}

// oldName is the state entry a re-addressed edge's old addresses drain
// under: "<name>.old", or ".old2", ".old3"… while an earlier one still
// drains (re-addressed again before its TTL and drain were over), so each
// keeps its own wait.
func oldName(st *State, name string) string {
	key := name + ".old"
	for i := 2; st.Edges[key] != nil; i++ {
		key = fmt.Sprintf("%s.old%d", name, i)
	}
	return key
}

// Run converges: 1 firewall allows the new edges, 2 each new edge is
// probed end to end, 3 DNS adds the new edges, 4 DNS removes the edges no
// longer listed, 5 a removed edge waits one TTL plus slack and its drain,
// 6 the firewall drops it. Each step is saved in the state file, so a run
// that is interrupted resumes where it stopped.
func (c *Converger) Run(ctx context.Context) error {
	cfg := c.Config
	if !c.DryRun && !c.Locked {
		unlock, err := LockState(c.StatePath)
		if err != nil {
			return err
		}
		defer unlock()
	}
	st, err := LoadState(c.StatePath)
	if err != nil {
		return err
	}
	live, err := c.DNS.Read(ctx)
	if err != nil {
		return err
	}
	for _, name := range st.Sorted() {
		if s := st.Edges[name]; s.State == StateDraining && !s.LeftDNS.IsZero() {
			c.printf("resuming: %s left DNS at %s", name, s.LeftDNS.UTC().Format(time.RFC3339))
		}
	}
	Reconcile(cfg, st, live)
	plan, err := PlanDNS(cfg.Name, live, cfg.Edges, uint32(cfg.TTL), st.Names())
	if err != nil {
		return err
	}
	save := func() error {
		if c.DryRun {
			return nil
		}
		return st.Save(c.StatePath)
	}
	// A key the server refuses would stop the run at step 3, after the
	// firewall changed: find out before.
	if len(plan.Changes) > 0 && !c.DryRun {
		if err := c.DNS.Check(ctx); err != nil {
			return err
		}
	}
	if err := save(); err != nil {
		return err
	}

	// 1. The firewall allows every listed edge, and still the draining ones.
	allow := slices.Clone(cfg.Edges)
	for _, name := range st.Sorted() {
		if s := st.Edges[name]; s.State == StateDraining {
			allow = append(allow, s.Edge(name))
		}
	}
	if err := c.allow("1/6", allow); err != nil {
		return err
	}

	// 2. Each new edge is probed end to end.
	var failed []string
	for _, e := range cfg.Edges {
		s := st.Edges[e.Name]
		if s.State == StateActive {
			continue
		}
		if c.DryRun {
			c.printf("step 2/6 probe: would probe %s end to end (%s)", e.Name, c.probeAddrs(e))
			continue
		}
		// New until published, even once probed: a rerun probes again.
		s.State, s.Error = StateNew, ""
		for _, a := range e.Addrs() {
			addr := net.JoinHostPort(a.String(), strconv.Itoa(cfg.Probe.Port))
			r := c.Probe(ctx, addr)
			if !r.OK {
				s.State, s.Error = StateFailed, r.Error
				c.printf("step 2/6 probe: %s %s failed: %s", e.Name, addr, r.Error)
				failed = append(failed, e.Name)
				break
			}
			c.printf("step 2/6 probe: %s %s ok, TLS handshake %.1f ms", e.Name, addr, r.HandshakeMS)
		}
	}
	if len(failed) > 0 {
		if err := save(); err != nil {
			return err
		}
		allowed := "the firewall allows it; "
		if c.Firewall == nil {
			allowed = ""
		}
		return fmt.Errorf("%w: %s not published (%sfix it and rerun): %s", ErrProbe,
			strings.Join(failed, ", "), allowed, st.Edges[failed[0]].Error)
	}

	// 3 and 4. One UPDATE per change, additions first, each read back.
	if len(plan.Changes) == 0 {
		c.printf("step 3/6 dns: %s in sync: %s", plan.Name, addrList(plan.After))
	}
	owner := st.Names()
	for _, ch := range plan.Changes {
		step := "3/6"
		if ch.Op == OpRemove {
			step = "4/6"
		}
		if c.DryRun {
			c.printf("step %s dns: would %s", step, ch.Describe())
			continue
		}
		if err := c.DNS.Apply(ctx, ch); err != nil {
			return err
		}
		switch ch.Op {
		case OpAdd:
			live.add(ch.Addr)
		case OpRemove:
			live.remove(ch.Addr)
		}
		c.printf("step %s dns: %s, read back", step, ch.Describe())
		if name, ok := owner[ch.Addr]; ok {
			c.markDNS(st, name, live, plan)
		}
		if err := save(); err != nil {
			return err
		}
	}
	for _, name := range st.Sorted() {
		c.markDNS(st, name, live, plan)
	}
	if err := save(); err != nil {
		return err
	}

	// 5. Removed edges wait for resolver caches and their drain.
	var done []string
	for _, name := range st.Sorted() {
		s := st.Edges[name]
		if s.State != StateDraining {
			continue
		}
		if c.DryRun {
			c.printf("step 5/6 wait: would wait for %s: TTL %ds + %v slack, then its drain (up to %v)", name, max(s.TTL, uint32(cfg.TTL)), c.Slack, cfg.DrainTimeout)
			continue
		}
		if err := c.wait(ctx, name, s); err != nil {
			return err
		}
		done = append(done, name)
	}

	// 6. The firewall drops them.
	if len(done) > 0 || c.DryRun {
		if err := c.allow("6/6", cfg.Edges); err != nil {
			return err
		}
	}
	for _, name := range done {
		delete(st.Edges, name)
	}
	if err := save(); err != nil {
		return err
	}
	switch {
	case c.DryRun:
	case c.Firewall == nil:
		c.printf("done: %s answers %s", plan.Name, addrList(plan.After))
	default:
		c.printf("done: %s answers %s; the firewall allows %s", plan.Name, addrList(plan.After), edgeNames(cfg.Edges))
	}
	return nil
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

// markDNS records an edge's DNS progress: published (active), or gone
// from DNS (draining, from now on, with the TTL resolvers may hold it).
func (c *Converger) markDNS(st *State, name string, live RRSet, plan DNSPlan) {
	s := st.Edges[name]
	addrs := s.Edge(name).Addrs()
	switch {
	case s.State == StateNew && !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return !live.Has(a) }):
		s.State = StateActive
	case s.State == StateDraining && s.LeftDNS.IsZero() && !slices.ContainsFunc(addrs, live.Has):
		s.LeftDNS = c.now()
		s.TTL = max(uint32(c.Config.TTL), live.TTLA, live.TTLAAAA, plan.beforeTTL)
	}
}

// allow runs a firewall step, printing what it does.
func (c *Converger) allow(step string, edges []Edge) error {
	if c.DryRun {
		c.printf("step %s firewall: would allow exactly %s", step, edgeNames(edges))
		return nil
	}
	if c.Firewall == nil {
		c.printf("step %s firewall: skipped (no firewall)", step)
		return nil
	}
	changed, err := c.Firewall.Allow(edges)
	if err != nil {
		return fmt.Errorf("firewall: %w", err)
	}
	what := "in sync"
	if changed {
		what = "applied"
	}
	c.printf("step %s firewall: %s, allowing %s", step, what, edgeNames(edges))
	return nil
}

// wait holds a removed edge until one TTL plus slack has passed since it
// left DNS, then until its active connections reach zero or drain_timeout
// passes, printing progress.
func (c *Converger) wait(ctx context.Context, name string, s *EdgeState) error {
	ttl := time.Duration(max(s.TTL, uint32(c.Config.TTL))) * time.Second
	left := s.LeftDNS
	if left.IsZero() {
		// [unexpected] an address of it is still published (under another
		// edge's name): count from now, never from the zero time.
		left = c.now()
	}
	cached := left.Add(ttl + c.Slack)
	every := c.Every
	if every <= 0 {
		every = 5 * time.Second
	}
	for {
		left := cached.Sub(c.now())
		if left <= 0 {
			break
		}
		c.printf("step 5/6 wait: %s left DNS at %s; resolvers may hold it %s more (TTL %v + slack %v)",
			name, s.LeftDNS.UTC().Format(time.RFC3339), left.Round(time.Second), ttl, c.Slack)
		if err := c.sleep(ctx, min(left, every)); err != nil {
			return err
		}
	}
	deadline := cached.Add(c.Config.DrainTimeout)
	if s.Metrics == "" || c.Conns == nil {
		if left := deadline.Sub(c.now()); left > 0 {
			c.printf("step 5/6 drain: %s has no metrics endpoint: waiting drain_timeout (%s left)", name, left.Round(time.Second))
			if err := c.sleep(ctx, left); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		n, err := c.Conns(ctx, s.Metrics)
		left := deadline.Sub(c.now())
		switch {
		case err == nil && n == 0:
			c.printf("step 5/6 drain: %s has no active connection", name)
			return nil
		case left <= 0:
			if err != nil {
				c.printf("step 5/6 drain: %s: drain_timeout passed (%v)", name, err)
			} else {
				c.printf("step 5/6 drain: %s: drain_timeout passed with %d active connections", name, n)
			}
			return nil
		case err != nil:
			c.printf("step 5/6 drain: %s: %v; waiting up to %s more", name, err, left.Round(time.Second))
		default:
			c.printf("step 5/6 drain: %s has %d active connections; waiting up to %s more", name, n, left.Round(time.Second))
		}
		if err := c.sleep(ctx, min(left, every, time.Second)); err != nil {
			return err
		}
	}
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
