package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/edgefleet/edgefleet/internal/clock"
)

// Dialer is the library form of edge selection for agents: DialContext
// returns a TLS connection to the best reachable edge, walking the
// ranking, then dials the plain hostname, exactly as the agent would
// without edgefleet. Make one with NewDialer; set the optional fields
// before the first call.
type Dialer struct {
	// Config is the selection configuration; NewDialer (or the first
	// call) gives its zero fields their defaults and checks it.
	Config Config
	// TLS is the agent's client config (ClientTLS); ServerName defaults
	// to Config.Name. Every address is verified against that name.
	TLS *tls.Config
	// Resolver resolves Config.Name; nil is the system resolver.
	Resolver *net.Resolver
	// Lookup returns the address set of a name; nil is Resolve through
	// Resolver. Unit tests of the selection logic replace it.
	Lookup func(ctx context.Context, name string) ([]string, error)
	// Now, if non-nil, is used instead of time.Now (internal/clock): the
	// clock of measured_at and staleness.
	Now func() time.Time
	// Log receives selection decisions; nil discards.
	Log *slog.Logger
	// Probe probes one address; nil is the full Probe with TLS and
	// Config.Budget. Unit tests of the selection logic replace it.
	Probe ProbeFunc

	once   sync.Once
	badCfg error // Config's error, set once by ready

	mu  sync.Mutex
	cur Ranking // the ranking in use; Chosen is the edge new connections use
	gen uint64  // counts the changes of cur, so a watcher round can tell it was replaced
}

// NewDialer returns a Dialer for cfg with the agent's TLS config conf:
// the zero fields of cfg take their defaults (budget 2 s, interval 5 min…)
// and the result is checked, so a mistake is an error here rather than
// a busy loop or an edge dial that fails at once.
func NewDialer(cfg Config, conf *tls.Config) (*Dialer, error) {
	d := &Dialer{Config: cfg, TLS: conf}
	if err := d.ready(); err != nil {
		return nil, err
	}
	return d, nil
}

// ready defaults and checks Config once, for a Dialer built without
// NewDialer as well.
func (d *Dialer) ready() error {
	d.once.Do(func() {
		d.Config = d.Config.withDefaults()
		if err := d.Config.Validate(); err != nil {
			d.badCfg = fmt.Errorf("probe config: %w", err)
		}
	})
	return d.badCfg
}

func (d *Dialer) now() time.Time {
	return clock.Now(d.Now)
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
	r, _ := d.current()
	return r
}

// current is Current and the generation it belongs to.
func (d *Dialer) current() (Ranking, uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.cur
	r.Addresses, r.Ranking = slices.Clone(r.Addresses), slices.Clone(r.Ranking)
	return r, d.gen
}

// Rank resolves the name, probes every address and writes the ranking to
// the state file: a fresh measurement whatever the state holds. Every
// failure ends in a Ranking without a choice (NoChoice says why).
func (d *Dialer) Rank(ctx context.Context) Ranking {
	if err := d.ready(); err != nil {
		return noChoice(d.Config.Name, nil, d.now(), err.Error())
	}
	addrs, _, r, ok, _ := d.resolve(ctx)
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
	if err := d.ready(); err != nil {
		return noChoice(d.Config.Name, nil, d.now(), err.Error())
	}
	r, _, _ := d.sel(ctx)
	return r
}

// sel is Select; it also returns the addresses it resolved in the
// resolver's order, which DialContext walks when it dials the name, and
// the resolver's error when the name did not resolve, which DialContext
// returns as the plain dial would have: either way the resolver is asked
// once per dial, not a second time for the name.
func (d *Dialer) sel(ctx context.Context) (Ranking, []netip.Addr, error) {
	addrs, order, r, ok, lookupErr := d.resolve(ctx)
	if !ok {
		return d.use(r), order, lookupErr
	}
	if cur := d.Current(); cur.sameSet(d.Config.Name, d.Config.Port, addrs) && cur.Chosen != "" && d.fresh(cur) {
		return cur, order, nil
	}
	if d.Config.State == "" {
		return d.use(d.measure(ctx, addrs)), order, nil
	}
	st, err := LoadState(d.Config.State)
	switch {
	case errors.Is(err, errNoState):
		d.log().Info("no state file: measuring", "target", d.Config.State)
	case err != nil:
		d.log().Warn("state file unusable: no choice", "err", err)
		return d.use(noChoice(d.Config.Name, addrs, d.now(), err.Error())), order, nil
	case !st.sameSet(d.Config.Name, d.Config.Port, addrs):
		d.log().Info("address set or port changed: measuring", "target", d.Config.Name)
	case !d.fresh(st):
		d.log().Info("measurement stale: measuring", "target", d.Config.Name, "duration", d.now().Sub(st.MeasuredAt))
	case st.Chosen == "":
		d.log().Info("state holds no choice: measuring", "target", d.Config.Name)
	default:
		return d.use(st), order, nil
	}
	return d.use(d.measure(ctx, addrs)), order, nil
}

func (d *Dialer) fresh(r Ranking) bool {
	age := d.now().Sub(r.MeasuredAt)
	return age >= 0 && age < d.Config.Stale
}

// resolve returns the address set (sorted), the same addresses in the
// resolver's order (what the dial of the name walks), or a no-choice
// Ranking and false when there is nothing to choose from; err is the
// resolver's error, if that is why.
func (d *Dialer) resolve(ctx context.Context) (addrs []string, order []netip.Addr, none Ranking, ok bool, err error) {
	if d.Lookup != nil {
		addrs, err = d.Lookup(ctx, d.Config.Name)
		for _, a := range addrs {
			if ip, perr := netip.ParseAddr(a); perr == nil {
				order = append(order, ip)
			}
		}
	} else if order, err = lookupOrder(ctx, d.Resolver, d.Config.Name); err == nil {
		addrs = sortedSet(order)
	}
	if err != nil {
		return nil, nil, noChoice(d.Config.Name, nil, d.now(), err.Error()), false, err
	}
	if len(addrs) < 2 {
		// Development: the name resolves to one address. Skip everything.
		return addrs, order, noChoice(d.Config.Name, addrs, d.now(), fmt.Sprintf("%d address(es): nothing to choose", len(addrs))), false, nil
	}
	return addrs, order, Ranking{}, true, nil
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

// set makes r the ranking in use; d.mu is held.
func (d *Dialer) set(r Ranking) {
	d.cur = r
	d.gen++
}

func (d *Dialer) use(r Ranking) Ranking {
	d.mu.Lock()
	d.set(r)
	d.mu.Unlock()
	return r
}

// useIf is use only if the ranking in use is still generation gen.
func (d *Dialer) useIf(gen uint64, r Ranking) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen != gen {
		return false
	}
	d.set(r)
	return true
}

// errReplaced is a watcher's decision about a ranking that is no longer
// the one in use: a dial or another measurement replaced it meanwhile.
var errReplaced = errors.New("the ranking in use changed during the round")

// chooseIf makes addr, an entry of the ranking in use, the choice and
// saves that, so a switch back survives a restart; only if the ranking
// in use is still generation gen, the one the decision was made on. When
// the state file cannot be written nothing changes.
func (d *Dialer) chooseIf(gen uint64, addr string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen != gen {
		return errReplaced
	}
	r := d.cur
	r.Chosen = addr
	if err := d.save(r); err != nil {
		return err
	}
	d.set(r)
	return nil
}

// commit saves r and makes it the ranking in use; saves are serialised
// so the file always holds the last ranking in use.
func (d *Dialer) commit(r Ranking) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.save(r); err != nil {
		return err
	}
	d.set(r)
	return nil
}

// commitIf is commit only if the ranking in use is still generation gen.
func (d *Dialer) commitIf(gen uint64, r Ranking) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen != gen {
		return errReplaced
	}
	if err := d.save(r); err != nil {
		return err
	}
	d.set(r)
	return nil
}

// DialContext connects to the chosen edge, else to each other edge that
// answered in ranking order, else to the name itself, and returns the
// TLS connection (handshake done, verified against the name). Moving to
// another edge is a failover: it is written to the state file, so a
// restart does not go back to the address that just failed.
//
// The walk follows the ranking in use, which a watcher round may replace
// while an edge is being dialed: an edge is kept only if the ranking in
// use at that moment ranks it next, so the choice written down is always
// one of its entries (and an edge that has just left the set is not kept).
//
// The resolver is asked once per call, as by a plain dial of the name:
// when the name does not resolve, its error is returned as the plain
// dial would return it; the dial of the name walks the addresses it
// gave.
func (d *Dialer) DialContext(ctx context.Context) (net.Conn, error) {
	if err := d.ready(); err != nil {
		return nil, err
	}
	_, order, err := d.sel(ctx)
	if err != nil {
		return nil, d.nameErr(err)
	}
	tried := map[string]bool{}
	for {
		addr, ok := d.nextEdge(tried)
		if !ok {
			break
		}
		tried[addr] = true
		c, err := d.dialEdge(ctx, addr)
		if err != nil {
			d.log().Warn("edge unreachable", "edge", addr, "err", err)
			if ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		if d.keep(addr, tried) {
			return c, nil
		}
		c.Close()
	}
	return d.dialName(ctx, order)
}

// nextEdge is the first address of walk(ranking in use) not tried yet.
func (d *Dialer) nextEdge(tried map[string]bool) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range walk(d.cur) {
		if !tried[a] {
			return a, true
		}
	}
	return "", false
}

// keep reports whether the connection to addr is the one the ranking in
// use asks for now: addr is one of its entries, it has a choice, and
// every address its walk puts before addr was tried. A connection to an
// address other than the choice is a failover, written down (in memory
// as well when the state file cannot be written: the agent is connected
// there).
func (d *Dialer) keep(addr string, tried map[string]bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur.Chosen == "" {
		d.log().Info("the ranking in use has no choice now: dialing the name", "edge", addr, "target", d.Config.Name)
		return false
	}
	if _, _, in := d.cur.Entry(addr); !in {
		d.log().Info("edge no longer in the ranking in use: dialing on", "edge", addr, "target", d.Config.Name)
		return false
	}
	for _, a := range walk(d.cur) {
		if a == addr {
			break
		}
		if !tried[a] {
			d.log().Info("the ranking in use changed: dialing its next edge", "edge", addr, "target", a)
			return false
		}
	}
	if addr == d.cur.Chosen {
		return true
	}
	d.log().Info("failover", "edge", addr, "target", d.cur.Chosen)
	r := d.cur
	r.Chosen = addr
	if err := d.save(r); err != nil {
		d.log().Warn("cannot write the state file", "err", err)
	}
	d.set(r)
	return true
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

// nameAddr is the name and port the agent dials without a choice.
func (d *Dialer) nameAddr() string {
	return net.JoinHostPort(d.Config.Name, strconv.Itoa(d.Config.Port))
}

// dialName is the connection without edgefleet: the name's addresses,
// walked as Go's dialer walks them, within ConnectTimeout (handshake
// included). They are the addresses sel has just resolved: resolving the
// name again would ask the resolver twice per dial (a resolver timing out
// on AAAA queries would cost its timeout twice, and the second time
// inside ConnectTimeout).
func (d *Dialer) dialName(ctx context.Context, order []netip.Addr) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.Config.ConnectTimeout)
	defer cancel()
	c, err := dialWalk(ctx, d.Config.dialer(), order, d.Config.Port)
	if err == nil {
		tc := tls.Client(c, d.tlsConfig())
		if err = tc.HandshakeContext(ctx); err == nil {
			return tc, nil
		}
		c.Close()
	}
	return nil, fmt.Errorf("dial %s: %w", d.nameAddr(), err)
}

// nameErr is the error Go's dial of the name returns for the resolver's
// err: a dial error holding the *net.DNSError.
func (d *Dialer) nameErr(err error) error {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		err = dnsErr
	}
	return fmt.Errorf("dial %s: %w", d.nameAddr(), &net.OpError{Op: "dial", Net: "tcp", Err: err})
}
