package origin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/edgefleet/edgefleet/internal/clock"
	"github.com/edgefleet/edgefleet/internal/evloop"
	"github.com/edgefleet/edgefleet/internal/loopguard"
	"github.com/edgefleet/edgefleet/internal/proxyheader"
	"github.com/edgefleet/edgefleet/internal/relayshell"
	"github.com/prometheus/client_golang/prometheus"
)

// innerDialTimeout bounds the connect to inner (a loopback service: it
// either answers at once or is down).
const innerDialTimeout = 3 * time.Second

// Front is the origin's front listener. For each accepted connection it
// reads the first bytes, reads a PROXY header if one is there and the
// source may send one, dials inner, records the peer in the table under the
// inner connection's local port, and copies both ways until both
// directions are done.
//
// Its connections run on event loops (internal/evloop): the accept, the
// header read, the non-blocking dial and the copy (read/write for small
// bursts, splice for bulk) without a goroutine per connection.
type Front struct {
	// Now, if non-nil, is used instead of time.Now (internal/clock): the
	// clock of Peer.Since, the durations and the log rate limit. Set it
	// before Serve.
	Now func() time.Time

	cfg Config
	// trusted is trusted_edges parsed; SetTrustedEdges replaces it while
	// the loops read it.
	trusted atomic.Pointer[parsed]
	table   *PeerTable
	log     *slog.Logger
	m       *metrics
	shell   relayshell.Shell // the loops, max_conns, the drain, the refusal-log limiter
	// own holds the inner connections, so that one coming back to the
	// front (inner is the front itself) is refused.
	own  *loopguard.Own
	dial evloop.DialOptions // no keepalive toward inner: a local peer that dies resets its connections itself
	// innerAddr is front.inner when it is an address; a name is looked
	// up per connection off the loop.
	innerAddr netip.AddrPort
	// shares are front.per_edge's limits, one share per trusted edge.
	shares *shares
}

// New checks cfg and returns a front that records peers in table, logs to
// log and registers its metrics with reg (nil: not registered).
func New(cfg Config, table *PeerTable, log *slog.Logger, reg prometheus.Registerer) (*Front, error) {
	p, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	if table == nil {
		return nil, errors.New("origin: nil peer table")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Front{
		cfg:   cfg,
		table: table,
		log:   log,
		m:     newMetrics(table),
		own:   loopguard.NewOwn(),
	}
	f.trusted.Store(&p)
	f.shares = newShares(cfg.PerEdge.Conns, p.rate, cfg.PerEdge.Rate, f.m.refused)
	if ap, err := netip.ParseAddrPort(cfg.Inner); err == nil {
		f.innerAddr = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	f.shell.Init((*handler)(f), cfg.MaxConns, log, f.now)
	f.dial = evloop.DialOptions{Timeout: innerDialTimeout, NoDelay: true, Sent: f.sent}
	if err := f.m.register(reg); err != nil {
		return nil, fmt.Errorf("origin: register metrics: %w", err)
	}
	return f, nil
}

func (f *Front) now() time.Time {
	return clock.Now(f.Now)
}

// SetTrustedEdges replaces trusted_edges (SIGHUP in cmd/origin) without
// touching a connection: each is judged by the list in force when it was
// accepted, the next ones by edges. A list the configuration check
// refuses (a bad prefix, link-local, empty with untrusted: reject)
// leaves the running one and is returned as an error.
func (f *Front) SetTrustedEdges(edges []string) error {
	c := f.cfg
	c.TrustedEdges = edges
	p, err := c.parse()
	if err != nil {
		return err
	}
	f.trusted.Store(&p)
	return nil
}

// SetPerEdge replaces front.per_edge (SIGHUP in cmd/origin): each edge's
// open connections and bucket stay, the next connections are judged by
// the new limits. Limits that fail the check change nothing.
func (f *Front) SetPerEdge(e PerEdge) error {
	rate, err := e.parse()
	if err != nil {
		return err
	}
	f.shares.set(e.Conns, rate, e.Rate)
	return nil
}

// TrustedEdges returns trusted_edges as in force now (after the last
// SetTrustedEdges).
func (f *Front) TrustedEdges() []string {
	return append([]string{}, f.trusted.Load().edges...)
}

// Serve accepts connections on ln and serves them on the event loops
// until Shutdown (then it returns nil) or until the listener fails for
// good. Serve takes a *net.TCPListener over: it is closed at once, the
// loops accept on descriptors of their own. Accepted sockets inherit
// TCP_NODELAY and Go's default keepalive (both set here on the listening
// socket): no setsockopt per connection. Another kind of listener is
// refused (closed, with an error).
func (f *Front) Serve(ln net.Listener) error {
	return f.shell.Serve(ln, relayshell.GoKeepalive)
}

// looped counts a connection that came from one of the front's own inner
// connections (inner is the front itself) and was closed.
func (f *Front) looped(measured string) {
	f.m.conns.WithLabelValues(HeaderNone, ResultLoop).Inc()
	if ok, suppressed := f.shell.Refusals.Allow(); ok {
		f.log.Warn("connection from the front itself refused: front.inner is this front", "measured", measured,
			"inner", f.cfg.Inner, "suppressed", suppressed)
	}
}

// reserve takes a slot for a new connection, or counts its refusal
// (shutting down, max_conns) and reports false.
func (f *Front) reserve() bool {
	switch f.shell.Admit() {
	case relayshell.Closing:
		f.m.conns.WithLabelValues(HeaderNone, ResultShutdown).Inc()
		return false
	case relayshell.Full:
		f.m.conns.WithLabelValues(HeaderNone, ResultMaxConns).Inc()
		return false
	}
	f.m.active.Inc()
	return true
}

// release gives a connection's slot back and wakes Shutdown after the
// last one.
func (f *Front) release() {
	f.m.active.Dec()
	f.shell.Release()
}

// Shutdown stops accepting at once and waits for open connections to end;
// when ctx is done first it closes them and returns ctx's error.
func (f *Front) Shutdown(ctx context.Context) error {
	return f.shell.Shutdown(ctx, relayshell.NoTimeout, nil)
}

// conn is the front's state of one connection on the event loops
// (evloop.Conn.Data).
type conn struct {
	start    time.Time
	measured string
	trusted  bool
	proxyheader.Info
	token   uint64         // the peer table's dial token, while dialling or inserted
	dialing bool           // token taken, not inserted yet
	port    int            // the inner connection's local port once inserted
	upLocal netip.AddrPort // the inner socket's local address while recorded in own
	counted bool           // admitted by the shell: released when done
	share   *share         // its edge's share (front.per_edge), released when done; nil without limits
}

// handler is the Front as the event loops see it.
type handler Front

// reasonCounted closes a connection whose result is counted already.
const reasonCounted = "counted"

// Open takes a new connection: refused when it comes from the front
// itself, when the front is closing or max_conns are open, (untrusted:
// reject) when its source is outside trusted_edges, or when its edge is
// over front.per_edge; otherwise its first bytes are read within
// header_timeout.
func (h *handler) Open(c *evloop.Conn) {
	f := (*Front)(h)
	fc := &conn{}
	c.Data = fc
	fc.measured = c.Peer().String()
	fc.Header = HeaderNone
	if f.own.Accepted(c.Peer(), c.Local(), relayshell.Killer{C: c}) {
		f.looped(fc.measured)
		c.Close(reasonCounted, nil)
		return
	}
	if !f.reserve() {
		c.Close(reasonCounted, nil)
		return
	}
	fc.counted = true
	fc.start = c.Now()
	fc.trusted = f.trusted.Load().trustsAddr(c.Peer().Addr())
	if !fc.trusted && f.cfg.Untrusted == UntrustedReject {
		f.refuse(fc, ResultUntrusted, "untrusted source rejected", nil)
		c.Close(reasonCounted, nil)
		return
	}
	if !f.takeShare(c, fc) {
		c.Close(reasonCounted, nil)
		return
	}
	c.ReadFirst(f.cfg.HeaderTimeout)
}

// takeShare admits fc into its edge's share (front.per_edge): the edge is
// the measured source, before a header could claim anything. Over the
// edge's cap or rate the refusal is counted and logged and takeShare
// reports false.
func (f *Front) takeShare(c *evloop.Conn, fc *conn) bool {
	// The clock read now, not the loop's reading (c.Now) taken when it
	// woke: a loop woken for another connection may accept this one later.
	sh, reason, limit := f.shares.admit(c.Peer().Addr(), fc.trusted, f.now())
	if reason == "" {
		fc.share = sh
		return true
	}
	f.m.conns.WithLabelValues(HeaderNone, ResultEdgeLimit).Inc()
	if ok, suppressed := f.shell.Refusals.Allow(); ok {
		f.log.Warn("edge over its share refused", "measured", fc.measured, "share", sh.label,
			"reason", reason, "limit", limit, "suppressed", suppressed)
	}
	return false
}

// Received decides on the first bytes: wait for more, refuse, or take the
// header off and dial inner.
func (h *handler) Received(c *evloop.Conn, b []byte, err error) {
	f := (*Front)(h)
	fc := c.Data.(*conn)
	if fc.dialing {
		// Decided already: inner's name is being looked up, and what the
		// client sends meanwhile is payload, kept for the copy. Examined
		// again, a PROXY line of the client's behind the edge's header
		// would replace the edge's claim, and dial a second time.
		return
	}
	d := examine(b, err, fc.trusted, f.cfg.RequireHeader)
	switch d.step {
	case stepWait:
		return
	case stepRefuse:
		f.refused(fc, d)
		c.Close(reasonCounted, nil)
		return
	}
	fc.Info = d.info
	c.Consume(d.n)
	fc.token, fc.dialing = f.table.beginDial(), true
	if f.innerAddr.IsValid() {
		c.Dial(f.innerAddr, &f.dial)
		return
	}
	go func() { // a name: looked up off the loop
		ap, err := f.resolveInner()
		c.Post(func(c *evloop.Conn) {
			if err != nil {
				h.Dialed(c, err)
				return
			}
			c.Dial(ap, &f.dial)
		})
	}()
}

// resolveInner looks up front.inner's first address.
func (f *Front) resolveInner() (netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(f.shell.Context(), innerDialTimeout)
	defer cancel()
	return evloop.Resolve(ctx, f.cfg.Inner)
}

// sent records the inner socket in own as soon as its connect is sent:
// on loopback the front's listener may accept the connection before the
// connect returns (inner is the front itself), and the looped one must be
// refused before it dials in turn.
func (f *Front) sent(c *evloop.Conn) {
	fc := c.Data.(*conn)
	fc.upLocal = c.UpstreamLocal()
	if f.own.Dialed(fc.upLocal, c.UpstreamPeer()) {
		f.refuse(fc, ResultLoop, "front.inner is this front", nil)
		c.Close(reasonCounted, nil)
	}
}

// Dialed records the peer under the inner connection's local port and
// starts the copy, the bytes read past the header first.
func (h *handler) Dialed(c *evloop.Conn, err error) {
	f := (*Front)(h)
	fc := c.Data.(*conn)
	if err != nil {
		f.forgetInner(fc)
		f.refuse(fc, ResultInnerError, "dial inner failed", fmt.Errorf("dial tcp %s: %w", f.cfg.Inner, err))
		c.Close(reasonCounted, nil)
		return
	}
	if f.own.Dialed(fc.upLocal, c.UpstreamPeer()) { // a loop refused on the accepting side meanwhile
		f.refuse(fc, ResultLoop, "front.inner is this front", nil)
		c.Close(reasonCounted, nil)
		return
	}
	local := c.UpstreamLocal()
	fc.port, fc.dialing = int(local.Port()), false
	f.table.insert(fc.token, Peer{
		InnerPort: fc.port,
		Claimed:   fc.Claimed,
		Measured:  fc.measured,
		Edge:      fc.Edge,
		ID:        fc.ID,
		Header:    fc.Header,
		Since:     fc.start,
		Inner:     local.String(),
		Share:     shareLabel(c.Peer().Addr(), fc.trusted),
	})
	f.m.ok(fc.Header).Inc()
	c.Relay(nil, nil)
}

// Closed erases the peer entry of a forwarded connection and writes its
// log line (none when no byte moved either way: a health check), then
// gives the slot back.
func (h *handler) Closed(c *evloop.Conn, res evloop.Result) {
	f := (*Front)(h)
	fc := c.Data.(*conn)
	forwarded := fc.port != 0
	if forwarded {
		f.table.remove(fc.port, fc.token)
	}
	f.forgetInner(fc)
	f.own.Forget(c.Peer(), c.Local(), relayshell.Killer{C: c})
	switch {
	case res.Reason == reasonCounted:
	case res.Reason == evloop.ReasonKilled: // own cut a loop from the dialling side
		f.looped(fc.measured)
	case !forwarded: // aborted by Shutdown before forwarding
		f.m.conns.WithLabelValues(fc.Header, ResultShutdown).Inc()
	case res.Up != 0 || res.Down != 0:
		f.logClosed(&fc.Info, fc.measured, fc.port, res.Up, res.Down, fc.start, res.Reason)
	}
	if fc.share != nil {
		f.shares.release(fc.share)
	}
	if fc.counted {
		f.release()
	}
}

// logClosed writes a forwarded connection's "connection closed" line.
// It hands the record to the handler itself, as slog's LogAttrs would,
// but without the caller's program counter (runtime.Callers, a stack
// walk per connection for a source no handler of ours writes), and with
// one reading of the clock for the line's time and the duration's end
// when the clock is the real one. The attributes are typed: no value is
// boxed into an interface.
func (f *Front) logClosed(h *proxyheader.Info, measured string, port int, up, down int64, start time.Time, reason string) {
	ctx := context.Background()
	if !f.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	end := f.now()
	at := end
	if f.Now != nil {
		at = time.Now()
	}
	r := slog.NewRecord(at, slog.LevelInfo, "connection closed", 0)
	r.AddAttrs(slog.String("id", h.ID), slog.String("claimed", h.Claimed), slog.String("measured", measured),
		slog.String("edge", h.Edge), slog.String("header", h.Header), slog.Int("inner_port", port),
		slog.Int64("bytes_up", up), slog.Int64("bytes_down", down),
		slog.Duration("duration", end.Sub(start)), slog.String("reason", reason))
	f.log.Handler().Handle(ctx, r)
}

// forgetInner settles a dial token that was not inserted and takes the
// inner socket out of own.
func (f *Front) forgetInner(fc *conn) {
	if fc.dialing {
		f.table.endDial(fc.token)
		fc.dialing = false
	}
	if fc.upLocal.IsValid() {
		f.own.Closed(fc.upLocal)
		fc.upLocal = netip.AddrPort{}
	}
}

// refused counts and logs a refusal examine decided.
func (f *Front) refused(fc *conn, d decision) {
	fc.Header = d.k.String()
	switch d.result {
	case ResultSpoofed:
		f.m.spoofed.Inc()
	case ResultTimeout:
		f.m.timeouts.Inc()
	}
	f.refuse(fc, d.result, d.msg, d.err)
}

// refuse counts a refused connection and, when msg is set, logs it
// through the rate limiter. The caller closes the connection after:
// whoever sees the close sees the count.
func (f *Front) refuse(fc *conn, result, msg string, err error) {
	f.m.conns.WithLabelValues(fc.Header, result).Inc()
	if msg == "" {
		return
	}
	if ok, suppressed := f.shell.Refusals.Allow(); ok {
		attrs := []any{"claimed", fc.Claimed, "measured", fc.measured, "header", fc.Header, "reason", result}
		if err != nil {
			attrs = append(attrs, "err", err)
		}
		if suppressed > 0 {
			attrs = append(attrs, "suppressed", suppressed)
		}
		level := slog.LevelWarn
		if result == ResultInnerError {
			level = slog.LevelError
		}
		f.log.Log(context.Background(), level, msg, attrs...)
	}
}

// step is examine's decision.
type step int

const (
	stepWait    step = iota // undecided: wait for more bytes
	stepRefuse              // close the connection (decision.result)
	stepForward             // dial inner; the first n bytes were the header
)

// decision is what the first bytes of a connection make of it.
type decision struct {
	step   step
	k      proxyheader.Kind // what the first bytes are, once known
	n      int              // stepForward: the header's length
	info   proxyheader.Info // stepForward: what the header says (header none without one)
	result string           // stepRefuse: the result label
	msg    string           // stepRefuse: the log message; "" writes no line
	err    error            // stepRefuse: why
}

// examine applies the sniff, the trust policy (docs/origin.md) and the
// header bounds to the first bytes b of a connection from a source
// trusted or not. err is how reading them ended so far: nil (more may
// come), io.EOF, a timeout (header_timeout ran out) or a read error.
// The event loops decide through it each time more bytes arrive.
func examine(b []byte, err error, trusted, requireHeader bool) decision {
	k, decided := proxyheader.Sniff(b, err == io.EOF)
	if !decided {
		if err == nil {
			return decision{}
		}
		return failed(proxyheader.None, err, len(b) > 0)
	}
	if v := judge(trusted, k, requireHeader); v.result != "" {
		return decision{step: stepRefuse, k: k, result: v.result, msg: v.msg}
	}
	if k == proxyheader.None {
		return decision{step: stepForward, info: proxyheader.Info{Header: HeaderNone}}
	}
	n, herr := proxyheader.Len(b, k)
	switch {
	case herr != nil:
		return failed(k, herr, true)
	case n == 0 && err == nil:
		return decision{k: k}
	case n == 0:
		return failed(k, proxyheader.Truncated(err), true)
	}
	info, perr := proxyheader.Read(b[:n], k)
	if perr != nil {
		return failed(k, perr, true)
	}
	return decision{step: stepForward, k: k, n: n, info: info}
}

// failed refuses a connection whose first bytes or header could not be
// read: too slow, gone before a byte (no log line), or broken.
func failed(k proxyheader.Kind, err error, gotBytes bool) decision {
	d := decision{step: stepRefuse, k: k, err: err}
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		d.result = ResultTimeout
		if gotBytes {
			d.msg = "proxy header timeout"
		}
	case !gotBytes:
		d.result = ResultEmpty
	default:
		d.result, d.msg = ResultBadHeader, "bad proxy header"
	}
	return d
}
