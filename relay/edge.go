// Package relay is the edge: a stateless TCP relay that accepts a client,
// connects to a selectable origin (balance: failover, round-robin or
// least-conn), writes a PROXY protocol header (v2 with the client's
// address, a connection id and the edge name) and splices the
// still-encrypted bytes both ways until both sides are done.
//
//	e, err := relay.New(cfg, log, prometheus.DefaultRegisterer)
//	go e.Serve(ln)                  // or e.HandleConn(c) for one connection
//	e.Shutdown(ctx)                 // stop accepting, drain, close
//
// The edge parses nothing of the payload and holds no secrets; with
// tls_gate on it dials only once the client's first bytes are a TLS
// ClientHello (gate.go, internal/clienthello), read in clear. An origin
// that fails to connect is OFFLINE for offline_retry; SetOrigins replaces
// the list at run time (SIGHUP in cmd/edge) keeping the state of origins
// that stay.
package relay

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/internal/clock"
	"github.com/edgefleet/edgefleet/internal/errclass"
	"github.com/edgefleet/edgefleet/internal/evloop"
	"github.com/edgefleet/edgefleet/internal/loopguard"
	"github.com/edgefleet/edgefleet/internal/proxyheader"
	"github.com/edgefleet/edgefleet/internal/relayshell"
	"github.com/edgefleet/edgefleet/internal/sockopt"
	"github.com/prometheus/client_golang/prometheus"
)

// Edge relays client connections to the origins. Its connections run on
// event loops (internal/evloop): no goroutine per connection.
type Edge struct {
	// Now, if non-nil, is used instead of time.Now (internal/clock): the
	// clock of the OFFLINE retry window, the refusal-log rate limit and
	// the durations measured and logged. Set it before Serve or HandleConn.
	Now func() time.Time

	cfg   Config
	log   *slog.Logger
	m     *metrics
	orig  *originSet
	shell relayshell.Shell // the loops, max_conns, the drain, the refusal-log limiter
	dial  evloop.DialOptions
	// own holds the edge's origin connections, so that a connection coming
	// back from one of them (an origin that is this edge) is refused.
	own *loopguard.Own
	adm *admission // limits: nil when they limit nothing
	// gate is tls_gate on; names its server_names in lower case.
	gate  bool
	names []string
}

// conn is the edge's state of one relayed connection (evloop.Conn.Data).
type conn struct {
	id      string
	start   time.Time
	plan    []*origin
	claim   uint64
	next    int            // plan[next] is the origin to try next
	origin  *origin        // the one being dialled, then the one connected
	busy    *origin        // the origin whose active count holds this connection
	counted bool           // admitted by the shell: released when done
	upLocal netip.AddrPort // the origin socket's local address while it is recorded in own
	local   error          // an origin of the plan was not reached for want of a local port (EADDRNOTAVAIL)
	over    func()         // HandleConn's
	ticket  ticket         // what the connection holds in the admission tables, when held
	held    bool           // ticket is to be released
}

// now is e.Now, or time.Now when that is nil.
func (e *Edge) now() time.Time {
	return clock.Now(e.Now)
}

// New checks cfg (Validate and CheckSelf) and returns an edge that records
// its metrics into reg (nil: not registered anywhere).
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Edge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.CheckSelf(); err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Edge{
		cfg:  cfg,
		log:  log,
		m:    m,
		orig: newOriginSet(cfg.Origins, cfg.OfflineRetry, cfg.Balance),
		own:  loopguard.NewOwn(),
	}
	if cfg.Limits.on() {
		e.adm = newAdmission(cfg.Limits)
		m.entries = e.adm.entries
	}
	e.gate, e.names = cfg.TLSGate.On(), helloNames(cfg.TLSGate)
	e.shell.Init((*handler)(e), cfg.MaxConns, log, e.now)
	e.dial = evloop.DialOptions{Timeout: cfg.ConnectTimeout, NoDelay: true, Keepalive: relayshell.Keepalive(cfg.Keepalive),
		Sent: e.sent}
	if cfg.Source != "" {
		e.dial.Source, _ = netip.ParseAddr(cfg.Source)
	}
	e.orig.mu.Lock()
	e.orig.gauge = func(name string, up, gone bool) {
		if gone {
			e.m.originUp.DeleteLabelValues(name)
			return
		}
		e.m.originUp.WithLabelValues(name).Set(b2f(up))
	}
	e.orig.mu.Unlock()
	for _, n := range e.orig.names() {
		e.m.originUp.WithLabelValues(n).Set(1)
	}
	return e, nil
}

// SetOrigins replaces the origin list. Origins that stay (by address)
// keep their OFFLINE state; connections already relayed are not touched.
func (e *Edge) SetOrigins(origins []Origin) {
	e.orig.set(origins) // the origin_up series follow, under the set's lock
}

// Serve accepts connections on ln and relays them on the event loops
// until the listener fails or Shutdown (then it returns nil). Serve takes
// ln over: it is closed at once, the loops accept on descriptors of their
// own, so only Shutdown stops serving.
//
// Accepted sockets inherit TCP_NODELAY and keepalive from the listening
// one: no setsockopt per connection. (A connection the kernel completed
// before Serve set the options keeps the kernel's defaults.) With the TLS
// gate on, the listening socket has TCP_DEFER_ACCEPT (deferAccept): the
// loop is woken once a client's first bytes are there.
func (e *Edge) Serve(ln net.Listener) error {
	if e.gate {
		if err := sockopt.DeferAccept(ln, deferAccept); err != nil {
			e.log.Warn("TCP_DEFER_ACCEPT not set: the loop wakes for the handshake, then for the ClientHello", "err", err)
		}
	}
	return e.shell.Serve(ln, relayshell.Keepalive(e.cfg.Keepalive))
}

// deferAccept is the gate's TCP_DEFER_ACCEPT: one second, the shortest,
// one SYN-ACK retransmission. A client whose ClientHello follows its
// handshake (every TLS client) is accepted with it; a silent one is
// accepted a second later without data, and hello_timeout runs from
// then (docs/edge.md).
const deferAccept = time.Second

// looped counts a connection that came from one of the edge's own origin
// connections (its origin is itself) and was closed; the line is
// rate-limited like every refusal.
func (e *Edge) looped() {
	e.m.total[ResultLoop].Inc()
	if ok, suppressed := e.shell.Refusals.Allow(); ok {
		e.log.Warn("connection from the edge itself refused: an origin is this edge", "origins", e.orig.names(),
			"suppressed", suppressed)
	}
}

// HandleConn relays one client connection (a *net.TCPConn accepted
// elsewhere) and returns when it is closed.
func (e *Edge) HandleConn(c net.Conn) {
	over := make(chan struct{})
	relayshell.Keepalive(e.cfg.Keepalive).Set(c)
	if err := e.shell.Server.Adopt(c, &conn{over: func() { close(over) }}); err != nil {
		e.log.Error("connection not relayed", "err", err)
		return
	}
	<-over
}

// handler is the Edge as the event loops see it.
type handler Edge

// Reasons of a connection the edge closes itself, not counted again in
// Closed (each is counted where it is decided).
const (
	reasonCounted = "counted" // counted already
	reasonSilent  = "silent"  // not counted: the edge is closing
)

// Open takes a new client connection: refused when the edge is closing,
// when max_conns are open, when it comes from the edge itself or when it
// is over one of the limits; otherwise the first origin of its plan is
// dialled, after its ClientHello when tls_gate is on (gate.go).
func (h *handler) Open(c *evloop.Conn) {
	e := (*Edge)(h)
	rc, _ := c.Data.(*conn)
	if rc == nil {
		rc = &conn{}
		c.Data = rc
	}
	switch e.shell.Admit() {
	case relayshell.Closing:
		c.Close(reasonSilent, nil)
		return
	case relayshell.Full:
		e.m.total[ResultMaxConns].Inc()
		c.Close(reasonCounted, nil)
		return
	}
	rc.counted = true
	e.m.active.Inc()
	if e.own.Accepted(c.Peer(), c.Local(), relayshell.Killer{C: c}) {
		e.looped()
		c.Close(reasonCounted, nil)
		return
	}
	if !e.admit(c, rc) {
		return
	}
	rc.id = rand.Text()
	rc.start = c.Now()
	e.awaitHello(c, rc)
}

// dialNext dials the next origin of rc's plan, or gives up.
func (e *Edge) dialNext(c *evloop.Conn, rc *conn) {
	if rc.next >= len(rc.plan) {
		e.orig.release(rc.plan, rc.claim)
		rc.plan = nil
		if rc.local != nil { // not every origin failed: some could not be tried
			e.m.total[ResultLocalResources].Inc()
			c.Close(reasonCounted, fmt.Errorf("%w: %w", errLocal, rc.local))
			return
		}
		e.m.total[ResultNoOrigin].Inc()
		c.Close(reasonCounted, errNoOrigin)
		return
	}
	o := rc.plan[rc.next]
	rc.next++
	rc.origin = o
	rc.busy = o
	o.active.Add(1)
	if o.ap.IsValid() {
		c.Dial(o.ap, &e.dial)
		return
	}
	// A name: looked up off the loop, then dialled from it.
	t0 := e.now()
	go func() {
		ctx, cancel := context.WithTimeout(e.shell.Context(), e.cfg.ConnectTimeout)
		defer cancel()
		ap, err := evloop.Resolve(ctx, o.addr)
		err = hideName(err, o)
		took := max(0, e.now().Sub(t0))
		if err != nil && !errclass.LocalResources(err) {
			if short := errclass.DescriptorShortage(); short != nil {
				// Whatever the lookup says ("no such host"), it ran
				// while this edge could not open a socket: not the
				// origin's failure.
				err = fmt.Errorf("%w, while this host is short of descriptors: %w", err, short)
			}
		}
		c.Post(func(c *evloop.Conn) {
			if err != nil {
				(*handler)(e).failed(c, rc, took, err)
				return
			}
			c.Dial(ap, &e.dial)
		})
	}()
}

// Dialed goes on with a connected origin (header, then the copy) or with
// the next origin of the plan.
func (h *handler) Dialed(c *evloop.Conn, err error) {
	e := (*Edge)(h)
	rc := c.Data.(*conn)
	if err != nil {
		h.failed(c, rc, c.DialDuration(), err)
		return
	}
	e.m.dial.Observe(c.DialDuration().Seconds())
	o := rc.origin
	if e.orig.ok(o) { // origin_up follows (unless SetOrigins removed it meanwhile)
		e.log.Info("origin back", "origin", o.name)
	}
	e.orig.release(rc.plan, rc.claim)
	rc.plan = nil
	if e.own.Dialed(rc.upLocal, c.UpstreamPeer()) { // the origin is this edge: the connection came back
		e.looped()
		c.Close(reasonCounted, nil)
		return
	}
	var hb [512]byte
	header, err := proxyheader.Append(hb[:0], headerVersion(e.cfg.ProxyProtocol), c.Peer(), c.Local(), rc.id, e.cfg.Name)
	if err != nil {
		c.Close(ResultServerError, fmt.Errorf("write proxy header: %w", err))
		return
	}
	c.Relay(header, screenProxy)
}

// sent records an origin socket in own as soon as its connect is sent:
// on loopback the listener may accept the connection before the connect
// returns, and a looped one must be refused before it dials in turn (a
// chain would grow one hop per loop iteration).
func (e *Edge) sent(c *evloop.Conn) {
	rc := c.Data.(*conn)
	rc.upLocal = c.UpstreamLocal()
	if e.own.Dialed(rc.upLocal, c.UpstreamPeer()) {
		e.looped()
		c.Close(reasonCounted, nil)
	}
}

// failed handles a failed dial: the edge's own lack of descriptors refuses
// the client without blaming the origin; otherwise the origin is OFFLINE
// and the next one is tried.
func (h *handler) failed(c *evloop.Conn, rc *conn, took time.Duration, err error) {
	e := (*Edge)(h)
	o := rc.origin
	e.forgetOrigin(rc)
	e.leaveOrigin(rc)
	e.m.dial.Observe(took.Seconds())
	err = fmt.Errorf("dial origin %s: %w", o.name, err)
	if e.shell.Context().Err() != nil {
		c.Close(ResultDrain, err)
		return
	}
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		// No local port left toward this origin's address: a shortage of
		// this destination only (ports are per destination), so the next
		// origin may have room. This one is not OFFLINE.
		rc.local = err
		if ok, suppressed := e.shell.Refusals.Allow(); ok {
			e.log.Warn("no local port left toward an origin: trying the next, none marked offline", "origin", o.name,
				"err", err, "suppressed", suppressed)
		}
		e.dialNext(c, rc)
		return
	}
	if errclass.LocalResources(err) { // the next origin would fail the same way
		if ok, suppressed := e.shell.Refusals.Allow(); ok {
			e.log.Warn("out of local resources: connection refused, no origin marked offline", "origin", o.name,
				"err", err, "suppressed", suppressed)
		}
		e.orig.release(rc.plan, rc.claim)
		rc.plan = nil
		e.m.total[ResultLocalResources].Inc()
		c.Close(reasonCounted, fmt.Errorf("%w: %w", errLocal, err))
		return
	}
	if e.orig.fail(o, c.Now()) {
		e.log.Warn("origin offline", "origin", o.name, "retry_in", e.cfg.OfflineRetry, "err", err)
	}
	e.dialNext(c, rc)
}

// Closed accounts for a finished connection: metrics, and one log line
// unless it carried nothing.
func (h *handler) Closed(c *evloop.Conn, res evloop.Result) {
	e := (*Edge)(h)
	rc := c.Data.(*conn)
	defer e.done(c, rc)
	if rc.plan != nil {
		e.orig.release(rc.plan, rc.claim)
		rc.plan = nil
	}
	reason := res.Reason
	switch reason {
	case reasonCounted, reasonSilent:
		return
	case evloop.ReasonAborted:
		reason = ResultDrain
	case evloop.ReasonKilled:
		e.looped()
		return
	}
	e.m.up.Add(float64(res.Up))
	e.m.down.Add(float64(res.Down))
	if errors.Is(res.Err, errClientProxy) {
		e.m.total[ResultClientProxy].Inc()
		e.m.clientProxy.Inc()
		if ok, suppressed := e.shell.Refusals.Allow(); ok {
			e.log.Warn("client proxy header refused", "id", rc.id, "client", c.Peer().String(),
				"origin", rc.origin.name, "suppressed", suppressed)
		}
		return
	}
	if reason == ResultEOF && res.Up == 0 && res.Down == 0 {
		e.m.total[ResultEmpty].Inc()
		return
	}
	e.m.total[reason].Inc()
	if res.Up == 0 && res.Down == 0 {
		return // silent: a connection that carried nothing writes no line
	}
	origin := ""
	if rc.origin != nil {
		origin = rc.origin.name
	}
	ctx := context.Background()
	if !e.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	// The record is handed to the handler as the front's logClosed does:
	// no caller PC (Logger.LogAttrs walks the stack for one that no
	// handler of ours writes: about 0.8 µs of a short connection's CPU in
	// the cheap-VM shape), typed attributes, no value boxed into an
	// interface.
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "connection closed", 0)
	r.AddAttrs(slog.String("id", rc.id), slog.String("client", c.Peer().String()), slog.String("origin", origin),
		slog.Int64("bytes_up", res.Up), slog.Int64("bytes_down", res.Down),
		slog.Duration("duration", c.Now().Sub(rc.start).Round(time.Millisecond)), slog.String("reason", reason))
	if res.Err != nil && reason != ResultDrain {
		r.AddAttrs(slog.Any("err", res.Err))
	}
	e.log.Handler().Handle(ctx, r)
}

// done forgets a finished connection and wakes Shutdown when it was the
// last one.
func (e *Edge) done(c *evloop.Conn, rc *conn) {
	e.own.Forget(c.Peer(), c.Local(), relayshell.Killer{C: c})
	e.forgetOrigin(rc)
	e.leaveOrigin(rc)
	if rc.held {
		e.adm.release(rc.ticket)
		rc.held = false
	}
	if rc.over != nil {
		defer rc.over()
	}
	if !rc.counted {
		return
	}
	e.m.active.Dec()
	e.shell.Release()
}

// forgetOrigin takes rc's origin socket out of own.
func (e *Edge) forgetOrigin(rc *conn) {
	if rc.upLocal.IsValid() {
		e.own.Closed(rc.upLocal)
		rc.upLocal = netip.AddrPort{}
	}
}

// leaveOrigin takes rc out of its origin's active count (least-conn).
func (e *Edge) leaveOrigin(rc *conn) {
	if rc.busy != nil {
		rc.busy.active.Add(-1)
		rc.busy = nil
	}
}

// hideName keeps an origin's host name out of a lookup's error (it is
// logged): the name the edge gives the origin stands in its place.
func hideName(err error, o *origin) error {
	var de *net.DNSError
	if !errors.As(err, &de) {
		return err
	}
	hidden := *de
	hidden.Name = o.name
	return &hidden
}

// errNoOrigin is the error of a connection for which every origin failed.
var errNoOrigin = errors.New("no origin reachable")

// errLocal is the error of a connection refused because a dial failed for
// lack of local resources (errclass.LocalResources): the edge's own
// descriptors or memory ran out, the origin was not reached and is not
// marked OFFLINE.
var errLocal = errors.New("out of local resources")

// Shutdown stops accepting at once, waits for open connections to finish
// until ctx is done or drain_timeout has passed, then closes the rest. It
// returns ctx's error when it had to cut connections because of ctx.
func (e *Edge) Shutdown(ctx context.Context) error {
	return e.shell.Shutdown(ctx, e.cfg.DrainTimeout, e.log)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
