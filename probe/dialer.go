package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Dialer is the library form of edge selection for agents: DialContext
// returns a TLS connection to the best reachable edge, walking the
// ranking, then dials the plain hostname, exactly as the agent would
// without edgefleet. Set the fields before the first call.
type Dialer struct {
	Config Config
	// TLS is the agent's client config (ClientTLS); ServerName defaults
	// to Config.Name. Every address is verified against that name.
	TLS *tls.Config
	// Resolver resolves Config.Name; nil is the system resolver.
	Resolver *net.Resolver
	// Lookup returns the address set of a name; nil is Resolve through
	// Resolver. Unit tests of the selection logic replace it.
	Lookup func(ctx context.Context, name string) ([]string, error)
	// Now is the clock of measured_at and staleness; nil is time.Now.
	Now func() time.Time
	// Log receives selection decisions; nil discards.
	Log *slog.Logger
	// Probe probes one address; nil is the full Probe with TLS and
	// Config.Budget. Unit tests of the selection logic replace it.
	Probe ProbeFunc

	mu  sync.Mutex
	cur Ranking // the ranking in use; Chosen is the current edge
}

func (d *Dialer) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func (d *Dialer) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.New(slog.DiscardHandler)
}

func (d *Dialer) tlsConfig() *tls.Config { return verifyAs(d.TLS, d.Config.Name) }

// verifyAs is a copy of conf (nil: an empty config) whose ServerName
// defaults to name: every address is verified against the name.
func verifyAs(conf *tls.Config, name string) *tls.Config {
	c := &tls.Config{}
	if conf != nil {
		c = conf.Clone()
	}
	if c.ServerName == "" {
		c.ServerName = name
	}
	return c
}

func (d *Dialer) probe(ctx context.Context, addr string) Result {
	if d.Probe != nil {
		return d.Probe(ctx, addr)
	}
	return probe(ctx, d.Config.dialer(), addr, d.tlsConfig(), d.Config.Budget, true)
}

// Current is the ranking in use (the zero Ranking before the first
// Select, Rank or DialContext), a copy.
func (d *Dialer) Current() Ranking {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.cur
	r.Addresses, r.Ranking = slices.Clone(r.Addresses), slices.Clone(r.Ranking)
	return r
}

// Rank resolves the name, probes every address and writes the ranking to
// the state file: a fresh measurement whatever the state holds. Every
// failure ends in a Ranking without a choice (NoChoice says why).
func (d *Dialer) Rank(ctx context.Context) Ranking {
	addrs, r, ok := d.resolve(ctx)
	if ok {
		r = d.measure(ctx, addrs)
	}
	return d.use(r)
}

// Select returns the ranking the agent should use: the state file's when
// it was measured on the current address set and is younger than Stale,
// else a fresh one (Rank). A missing state file is a first start and
// measures; an unreadable or corrupt one means no choice, because
// selection must never become a new failure mode.
func (d *Dialer) Select(ctx context.Context) Ranking {
	addrs, r, ok := d.resolve(ctx)
	if !ok {
		return d.use(r)
	}
	if cur := d.Current(); cur.sameSet(d.Config.Name, d.Config.Port, addrs) && cur.Chosen != "" && d.fresh(cur) {
		return cur
	}
	if d.Config.State == "" {
		return d.use(d.measure(ctx, addrs))
	}
	st, err := LoadState(d.Config.State)
	switch {
	case errors.Is(err, errNoState):
		d.log().Info("no state file: measuring", "target", d.Config.State)
	case err != nil:
		d.log().Warn("state file unusable: no choice", "err", err)
		return d.use(noChoice(d.Config.Name, addrs, d.now(), err.Error()))
	case !st.sameSet(d.Config.Name, d.Config.Port, addrs):
		d.log().Info("address set or port changed: measuring", "target", d.Config.Name)
	case !d.fresh(st):
		d.log().Info("measurement stale: measuring", "target", d.Config.Name, "duration", d.now().Sub(st.MeasuredAt))
	case st.Chosen == "":
		d.log().Info("state holds no choice: measuring", "target", d.Config.Name)
	default:
		return d.use(st)
	}
	return d.use(d.measure(ctx, addrs))
}

func (d *Dialer) fresh(r Ranking) bool {
	age := d.now().Sub(r.MeasuredAt)
	return age >= 0 && age < d.Config.Stale
}

// resolve returns the address set, or a no-choice Ranking and false when
// there is nothing to choose from.
func (d *Dialer) resolve(ctx context.Context) ([]string, Ranking, bool) {
	lookup := d.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, name string) ([]string, error) { return Resolve(ctx, d.Resolver, name) }
	}
	addrs, err := lookup(ctx, d.Config.Name)
	if err != nil {
		return nil, noChoice(d.Config.Name, nil, d.now(), err.Error()), false
	}
	if len(addrs) < 2 {
		// Development: the name resolves to one address. Skip everything.
		return addrs, noChoice(d.Config.Name, addrs, d.now(), fmt.Sprintf("%d address(es): nothing to choose", len(addrs))), false
	}
	return addrs, Ranking{}, true
}

// measure probes the set and saves the ranking; a ranking nobody answered
// or that cannot be saved is no choice.
func (d *Dialer) measure(ctx context.Context, addrs []string) Ranking {
	r := Ranking{Name: d.Config.Name, Addresses: addrs, MeasuredAt: d.now(),
		Ranking: Measure(ctx, addrs, d.Config.Port, d.probe)}
	if r.Ranking[0].OK {
		r.Chosen = r.Ranking[0].Addr
	}
	d.log().Info("ranked", "target", d.Config.Name, "edge", r.Chosen, "result", okCount(r.Ranking))
	if err := d.commit(r); err != nil {
		d.log().Warn("cannot write the state file: no choice", "err", err)
		r.Chosen, r.NoChoice = "", err.Error()
		return r
	}
	if r.Chosen == "" {
		r.NoChoice = "no address answered the probe"
	}
	return r
}

func okCount(rs []Result) string {
	n := 0
	for _, r := range rs {
		if r.OK {
			n++
		}
	}
	return fmt.Sprintf("%d/%d answered", n, len(rs))
}

func (d *Dialer) save(r Ranking) error {
	if d.Config.State == "" {
		return nil
	}
	return SaveState(d.Config.State, r)
}

func (d *Dialer) use(r Ranking) Ranking {
	d.mu.Lock()
	d.cur = r
	d.mu.Unlock()
	return r
}

// choose makes addr the current edge and saves that, so the choice (a
// failover, a switch back) survives a restart. When the state file cannot
// be written the choice is kept in memory only if keep is set (the agent
// is already connected there); otherwise nothing changes.
func (d *Dialer) choose(addr string, keep bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.cur
	r.Chosen = addr
	err := d.save(r)
	if err == nil || keep {
		d.cur = r
	}
	return err
}

// commit saves r and makes it the ranking in use; saves are serialised
// so the file always holds the last ranking in use.
func (d *Dialer) commit(r Ranking) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.save(r); err != nil {
		return err
	}
	d.cur = r
	return nil
}

// DialContext connects to the chosen edge, else to each other edge that
// answered in ranking order, else to the name itself, and returns the
// TLS connection (handshake done, verified against the name). Moving to
// another edge is a failover: it is written to the state file, so a
// restart does not go back to the address that just failed.
func (d *Dialer) DialContext(ctx context.Context) (net.Conn, error) {
	r := d.Select(ctx)
	for _, addr := range walk(r) {
		c, err := d.dialEdge(ctx, addr)
		if err != nil {
			d.log().Warn("edge unreachable", "edge", addr, "err", err)
			if ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		if addr != r.Chosen {
			d.log().Info("failover", "edge", addr, "target", r.Chosen)
			if err := d.choose(addr, true); err != nil {
				d.log().Warn("cannot write the state file", "err", err)
			}
		}
		return c, nil
	}
	return d.dialName(ctx)
}

// walk is the order DialContext tries: the chosen edge, then the others
// that answered, in ranking order.
func walk(r Ranking) []string {
	if r.Chosen == "" {
		return nil
	}
	out := []string{r.Chosen}
	for _, e := range r.Ranking {
		if e.OK && e.Addr != r.Chosen {
			out = append(out, e.Addr)
		}
	}
	return out
}

// dialEdge is the agent's connection through one edge, bounded like a probe.
func (d *Dialer) dialEdge(ctx context.Context, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.Config.Budget)
	defer cancel()
	td := tls.Dialer{NetDialer: d.Config.dialer(), Config: d.tlsConfig()}
	return td.DialContext(ctx, "tcp", addr)
}

// dialName is the connection without edgefleet: the name, through the
// same resolver, with Go's own walk of its addresses.
func (d *Dialer) dialName(ctx context.Context) (net.Conn, error) {
	nd := d.Config.dialer()
	nd.Resolver = d.Resolver
	td := tls.Dialer{NetDialer: nd, Config: d.tlsConfig()}
	addr := net.JoinHostPort(d.Config.Name, strconv.Itoa(d.Config.Port))
	c, err := td.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return c, nil
}
