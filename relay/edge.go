// Package relay is the edge: a stateless TCP relay that accepts a client,
// connects to the first selectable origin, writes a PROXY protocol header
// (v2 with the client's address, a connection id and the edge name) and
// splices the still-encrypted bytes both ways until both sides are done.
//
//	e, err := relay.New(cfg, log, prometheus.DefaultRegisterer)
//	go e.Serve(ln)                  // or e.HandleConn(c) for one connection
//	e.Shutdown(ctx)                 // stop accepting, drain, close
//
// The edge parses nothing of the payload and holds no secrets. An origin
// that fails to connect is OFFLINE for offline_retry; SetOrigins replaces
// the list at run time (SIGHUP in cmd/edge) keeping the state of origins
// that stay.
package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/internal/accept"
	"github.com/edgefleet/edgefleet/internal/sockopt"
	"github.com/edgefleet/edgefleet/internal/splice"
	"github.com/edgefleet/edgefleet/internal/workers"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// A refused connection (a client's own PROXY header, a loop) logs at most
// refusalLogBurst lines per refusalLogWindow; the next line says how many
// were suppressed.
const (
	refusalLogBurst  = 10
	refusalLogWindow = 10 * time.Second
)

// Edge relays client connections to the origins.
type Edge struct {
	// Now is the clock of the OFFLINE retry window, the refusal-log rate
	// limit and the durations measured and logged; nil means time.Now.
	// Set it before Serve or HandleConn.
	Now func() time.Time

	cfg    Config
	log    *slog.Logger
	dialer net.Dialer
	m      *metrics
	orig   *originSet
	// workers run relay's setup (dial, header) in goroutines whose stacks
	// have grown already.
	workers workers.Pool
	// own holds the edge's origin connections, so that a connection coming
	// back from one of them (an origin that is this edge) is refused.
	own *accept.Own
	// refusals rate-limits the log lines of refused connections.
	refusals *accept.Limiter

	// ctx is cancelled when Shutdown gives up waiting, so pending origin
	// dials stop too.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   bool          // Shutdown called: accept nothing more
	idle      chan struct{} // closed when closing and conns is empty
}

// conn is one relayed connection, tracked so Shutdown can close it.
type conn struct {
	client net.Conn
	server net.Conn     // nil until the origin is connected
	pair   *splice.Pair // nil until the bytes flow; then close through it
	forced bool         // closed by Shutdown
}

// now is e.Now, or time.Now when that is nil.
func (e *Edge) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
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
	ctx, cancel := context.WithCancel(context.Background())
	e := &Edge{
		cfg:       cfg,
		log:       log,
		m:         m,
		orig:      newOriginSet(cfg.Origins, cfg.OfflineRetry),
		ctx:       ctx,
		cancel:    cancel,
		listeners: map[net.Listener]struct{}{},
		conns:     map[*conn]struct{}{},
		idle:      make(chan struct{}),
		own:       accept.NewOwn(),
	}
	e.refusals = accept.NewLimiter(refusalLogBurst, refusalLogWindow, e.now)
	e.dialer = net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: -1}
	if cfg.Keepalive > 0 {
		e.dialer.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: cfg.Keepalive, Interval: cfg.Keepalive, Count: 4}
	}
	if cfg.Source != "" {
		e.dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(cfg.Source)}
	}
	for a := range e.orig.states() {
		e.m.originUp.WithLabelValues(a).Set(1)
	}
	return e, nil
}

// SetOrigins replaces the origin list. Origins that stay keep their
// OFFLINE state; connections already relayed are not touched.
func (e *Edge) SetOrigins(origins []string) {
	for _, a := range e.orig.set(origins) {
		e.m.originUp.DeleteLabelValues(a)
	}
	for a, up := range e.orig.states() {
		e.m.originUp.WithLabelValues(a).Set(b2f(up))
	}
}

// Serve accepts connections on ln and relays each in its own goroutine
// until ln fails or Shutdown closes it (then it returns nil).
func (e *Edge) Serve(ln net.Listener) error {
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		ln.Close()
		return nil
	}
	e.listeners[ln] = struct{}{}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.listeners, ln)
		e.mu.Unlock()
	}()

	// Accepted sockets inherit keepalive from the listening one; whether
	// they really do is checked on the first connections until one has
	// it: Go's listener may set its own default on each, and a connection
	// the kernel completed before this call took the listener's options
	// from before it.
	ka := keepalive(e.cfg.Keepalive)
	onListener := ka.Set(ln) == nil
	inherit, checks := false, 0
	loop := accept.Loop{
		Handle: func(c net.Conn) {
			if onListener && !inherit && checks < inheritChecks {
				checks++
				inherit = ka.Has(c)
			}
			kaSet := inherit
			e.workers.Go(func() { e.relay(c, kaSet, nil) })
		},
		Closing: e.isClosing,
		Log:     e.log,
		Own:     e.own,
		Looped:  func(net.Conn) { e.looped() },
		Now:     e.now,
	}
	return loop.Serve(ln)
}

// inheritChecks is how many accepted connections Serve checks for the
// listener's keepalive before it sets keepalive on each itself.
const inheritChecks = 8

func (e *Edge) isClosing() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closing
}

// looped counts a connection that came from one of the edge's own origin
// connections (its origin is itself) and was closed; the line is
// rate-limited like every refusal.
func (e *Edge) looped() {
	e.m.total[ResultLoop].Inc()
	if ok, suppressed := e.refusals.Allow(); ok {
		e.log.Warn("connection from the edge itself refused: an origin is this edge", "origins", e.orig.addrs(),
			"suppressed", suppressed)
	}
}

// HandleConn relays one client connection and returns when it is closed.
func (e *Edge) HandleConn(c net.Conn) {
	over := make(chan struct{})
	e.relay(c, false, func() { close(over) })
	<-over
}

// relay connects c to an origin and returns when the client→origin
// direction has gone idle or ended (or c was turned away); over, when not
// nil, is called once the connection is finished. Serve runs it in a
// goroutine of its own, which then exits: an idle connection keeps no
// goroutine (see splice.Start).
func (e *Edge) relay(c net.Conn, keepaliveSet bool, over func()) {
	if over == nil {
		over = func() {}
	}
	start := e.now()
	rc := &conn{client: c}
	e.mu.Lock()
	switch {
	case e.closing:
		e.mu.Unlock()
		e.own.Forget(c)
		c.Close()
		over()
		return
	case len(e.conns) >= e.cfg.MaxConns:
		e.mu.Unlock()
		e.own.Forget(c)
		c.Close()
		e.m.total[ResultMaxConns].Inc()
		over()
		return
	}
	e.conns[rc] = struct{}{}
	e.mu.Unlock()
	e.m.active.Inc()

	if !keepaliveSet {
		keepalive(e.cfg.Keepalive).Set(c)
	}
	id := rand.Text()
	server, addr, err := e.dialOrigin()
	e.mu.Lock()
	rc.server = server
	forced := rc.forced
	e.mu.Unlock()
	switch {
	case forced: // Shutdown closed the client while we dialled
		if server != nil {
			server.Close()
		}
		e.m.total[ResultDrain].Inc()
		e.done(rc)
		over()
		return
	case errors.Is(err, errLocal):
		c.Close()
		e.m.total[ResultLocalResources].Inc()
		e.done(rc)
		over()
		return
	case err != nil:
		c.Close()
		e.m.total[ResultNoOrigin].Inc()
		e.done(rc)
		over()
		return
	case e.own.Dialed(server): // the origin is this edge: the connection came back
		c.Close()
		server.Close()
		e.looped()
		e.done(rc)
		over()
		return
	}

	sent, held, cerr, serr := e.sendHeader(c, server, id)
	if cerr != nil || serr != nil {
		c.Close()
		server.Close()
		res := splice.Result{Reason: splice.ReasonClientError, Err: cerr}
		if serr != nil {
			res = splice.Result{Reason: ResultServerError, Err: fmt.Errorf("write proxy header: %w", serr)}
		}
		e.closed(rc, id, addr, start, res)
		over()
		return
	}
	var client net.Conn = c
	if held != nil { // a prefix of a PROXY signature: screened with what follows
		client = &splice.Conn{Conn: c, Peeked: held}
	}
	pair := splice.Prepare(client, server, func(res splice.Result) {
		res.Up += sent
		e.closed(rc, id, addr, start, res)
		over()
	})
	if held != nil || sent == 0 {
		pair.Screen(screenProxy) // on the first read the copy makes anyway
	}
	e.mu.Lock()
	rc.pair = pair
	forced = rc.forced
	e.mu.Unlock()
	if forced { // Shutdown came between the dial and now
		pair.Close()
	}
	pair.Run() // client→origin in this goroutine until it idles or ends
}

// firstBufSize holds the PROXY header and the client's first bytes (a
// TLS ClientHello, an LDAP bind); more of them follow through the copy.
const firstBufSize = 4096

// firstBuf is sendHeader's pooled buffer, with readNow's state and
// callback bound once, so that a connection allocates none of them.
type firstBuf struct {
	b    [firstBufSize]byte
	in   []byte // where readNow reads into, then what it read
	err  error
	read func(fd uintptr) bool
}

var firstBufs = sync.Pool{New: func() any {
	f := &firstBuf{}
	f.read = func(fd uintptr) bool {
		for {
			n, err := splice.ReadNow(int(fd), f.in)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN || (err == nil && n == 0): // nothing yet, or EOF: the copy sees it
				f.in = nil
			case err != nil:
				f.in, f.err = nil, os.NewSyscallError("read", err)
			default:
				f.in = f.in[:n]
			}
			return true // one attempt, never a wait
		}
	}
	return f
}}

// sendHeader writes the PROXY header to server. The client's first bytes
// have usually arrived while the origin was dialled: when they have and
// pass screenProxy, they go out with the header in one write (one
// segment, one system call fewer), and sent counts them. Bytes that are a
// prefix of a PROXY signature come back as held, for the copy to screen
// with what follows. cerr refuses the client (its own PROXY header, a
// failed read) before the origin saw a byte; serr is a failed write.
func (e *Edge) sendHeader(c, server net.Conn, id string) (sent int64, held []byte, cerr, serr error) {
	buf := firstBufs.Get().(*firstBuf)
	defer firstBufs.Put(buf)
	out, err := appendProxyHeader(buf.b[:0], e.cfg.ProxyProtocol, c.RemoteAddr(), c.LocalAddr(), id, e.cfg.Name)
	if err != nil {
		return 0, nil, nil, err
	}
	first, err := buf.readNow(c, out[len(out):cap(out)])
	if err != nil {
		return 0, nil, err, nil
	}
	if len(first) > 0 {
		switch err := screenProxy(first); err {
		case nil:
			out = out[:len(out)+len(first)]
			sent = int64(len(first))
		case splice.ErrMore:
			held = bytes.Clone(first) // first is in buf, which goes back to the pool
		default:
			return 0, nil, err, nil
		}
	}
	if len(out) > 0 {
		if _, err := server.Write(out); err != nil {
			return 0, nil, nil, err
		}
	}
	return sent, held, nil, nil
}

// readNow reads what c has received already into b, without waiting:
// nothing (and no error) when no byte is there yet, at EOF, or when c is
// not a socket.
func (f *firstBuf) readNow(c net.Conn, b []byte) ([]byte, error) {
	sc, ok := c.(syscall.Conn)
	if !ok || len(b) == 0 {
		return nil, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, nil
	}
	f.in, f.err = b, nil
	if err := raw.Read(f.read); err != nil {
		return nil, err
	}
	in, err := f.in, f.err
	f.in, f.err = nil, nil
	return in, err
}

// closed accounts for a finished connection: metrics, and one log line
// unless it carried nothing.
func (e *Edge) closed(rc *conn, id, origin string, start time.Time, res splice.Result) {
	defer e.done(rc)
	e.m.up.Add(float64(res.Up))
	e.m.down.Add(float64(res.Down))
	reason := res.Reason
	e.mu.Lock()
	if rc.forced {
		reason = ResultDrain
	}
	e.mu.Unlock()
	if errors.Is(res.Err, errClientProxy) {
		e.m.total[ResultClientProxy].Inc()
		e.m.clientProxy.Inc()
		if ok, suppressed := e.refusals.Allow(); ok {
			e.log.Warn("client proxy header refused", "id", id, "client", rc.client.RemoteAddr().String(),
				"origin", origin, "suppressed", suppressed)
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
	// Typed attributes: no value boxed into an interface.
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs,
		slog.String("id", id),
		slog.String("client", rc.client.RemoteAddr().String()),
		slog.String("origin", origin),
		slog.Int64("bytes_up", res.Up),
		slog.Int64("bytes_down", res.Down),
		slog.Duration("duration", e.now().Sub(start).Round(time.Millisecond)),
		slog.String("reason", reason),
	)
	if res.Err != nil && reason != ResultDrain {
		attrs = append(attrs, slog.Any("err", res.Err))
	}
	e.log.LogAttrs(context.Background(), slog.LevelInfo, "connection closed", attrs...)
}

// done forgets rc and wakes Shutdown when it was the last one.
func (e *Edge) done(rc *conn) {
	e.own.Forget(rc.client)
	if rc.server != nil {
		e.own.Closed(rc.server)
	}
	e.m.active.Dec()
	e.mu.Lock()
	delete(e.conns, rc)
	if e.closing && len(e.conns) == 0 {
		select {
		case <-e.idle:
		default:
			close(e.idle)
		}
	}
	e.mu.Unlock()
}

// errNoOrigin is returned by dialOrigin when every attempt failed.
var errNoOrigin = errors.New("no origin reachable")

// errLocal is returned by dialOrigin when a dial failed for lack of local
// resources (accept.LocalResources): the edge's own descriptors or memory
// ran out, the origin was not reached and is not marked OFFLINE.
var errLocal = errors.New("out of local resources")

// dialOrigin connects to the first origin of the plan that answers.
func (e *Edge) dialOrigin() (net.Conn, string, error) {
	plan, claim := e.orig.plan(e.now())
	defer e.orig.release(plan, claim)
	for _, o := range plan {
		t0 := e.now()
		c, err := e.dialer.DialContext(e.ctx, "tcp", o.addr)
		e.m.dial.Observe(e.now().Sub(t0).Seconds())
		if err == nil {
			if e.orig.ok(o) {
				e.m.originUp.WithLabelValues(o.addr).Set(1)
				e.log.Info("origin back", "origin", o.addr)
			}
			return c, o.addr, nil
		}
		if e.ctx.Err() != nil {
			return nil, "", err
		}
		if accept.LocalResources(err) { // the next origin would fail the same way
			if ok, suppressed := e.refusals.Allow(); ok {
				e.log.Warn("out of local resources: connection refused, no origin marked offline", "origin", o.addr,
					"err", err, "suppressed", suppressed)
			}
			return nil, "", fmt.Errorf("dial origin %s: %w: %w", o.addr, errLocal, err)
		}
		if e.orig.fail(o, e.now()) {
			e.m.originUp.WithLabelValues(o.addr).Set(0)
			e.log.Warn("origin offline", "origin", o.addr, "retry_in", e.cfg.OfflineRetry, "err", err)
		}
	}
	return nil, "", errNoOrigin
}

// Shutdown stops accepting at once, waits for open connections to finish
// until ctx is done or drain_timeout has passed, then closes the rest. It
// returns ctx's error when it had to cut connections because of ctx.
func (e *Edge) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	for ln := range e.listeners {
		ln.Close()
	}
	if len(e.conns) == 0 {
		select {
		case <-e.idle:
		default:
			close(e.idle)
		}
	}
	open := len(e.conns)
	e.mu.Unlock()
	if open > 0 {
		e.log.Info("draining", "connections", open, "drain_timeout", e.cfg.DrainTimeout)
	}

	timer := time.NewTimer(e.cfg.DrainTimeout)
	defer timer.Stop()
	var err error
	select {
	case <-e.idle:
		e.cancel()
		return nil
	case <-timer.C:
	case <-ctx.Done():
		err = ctx.Err()
	}
	e.cancel()
	e.mu.Lock()
	n := len(e.conns)
	for rc := range e.conns {
		rc.forced = true
		switch {
		case rc.pair != nil:
			rc.pair.Close() // also wakes directions parked while idle
		case rc.server != nil:
			rc.client.Close()
			rc.server.Close()
		default:
			rc.client.Close()
		}
	}
	e.mu.Unlock()
	if n > 0 {
		e.log.Warn("drain timeout: closing connections", "connections", n)
	}
	<-e.idle
	return err
}

// keepalive is the relay's TCP keepalive both ways: idle time and
// interval period, 4 probes; period 0 turns it off.
func keepalive(period time.Duration) sockopt.Keepalive {
	if period <= 0 {
		return sockopt.Keepalive{}
	}
	return sockopt.Keepalive{Idle: period, Interval: period, Count: 4}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
