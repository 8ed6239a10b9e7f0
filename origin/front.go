package origin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/edgefleet/edgefleet/internal/accept"
	"github.com/edgefleet/edgefleet/internal/splice"
	"github.com/edgefleet/edgefleet/internal/workers"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	// innerDialTimeout bounds the connect to inner (a loopback service:
	// it either answers at once or is down).
	innerDialTimeout = 3 * time.Second
	// A refused connection (spoof, bad header, timeout, …) logs at most
	// refusalLogBurst lines per refusalLogWindow; the rest are counted and
	// the next line says how many were suppressed.
	refusalLogBurst  = 10
	refusalLogWindow = 10 * time.Second
)

// Front is the origin's front listener. For each accepted connection it
// peeks at the first bytes, reads a PROXY header if one is there and the
// source may send one, dials inner, records the peer in the table under the
// inner connection's local port, and joins the two connections with
// splice (Prepare, then Run) until both directions are done.
type Front struct {
	// Now is the clock for Peer.Since, durations and log rate limiting;
	// nil means time.Now. Set it before Serve or HandleConn.
	Now func() time.Time

	cfg      Config
	p        parsed
	table    *PeerTable
	log      *slog.Logger
	m        *metrics
	refusals *accept.Limiter
	// own holds the inner connections, so that one coming back to the
	// front (inner is the front itself) is refused.
	own *accept.Own
	// dialer sets no keepalive on the loopback connection to inner: it
	// saves four setsockopt calls per connection, and a local peer that
	// dies resets its connections itself.
	dialer net.Dialer
	// handlers run HandleConn for Serve in goroutines whose stacks have
	// already grown in the deep calls of a connection's setup (sniff,
	// dial, splice, log line): a fresh goroutine per connection paid to
	// grow and copy its stack every time.
	handlers workers.Pool
	ctx      context.Context // cancelled when Shutdown gives up waiting
	cancel   context.CancelFunc

	mu        sync.Mutex
	closing   bool
	listeners map[net.Listener]struct{}
	sessions  map[*session]struct{} // open connections, closed on a forced shutdown
	wg        sync.WaitGroup        // one per open connection
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
		cfg:       cfg,
		p:         p,
		table:     table,
		log:       log,
		m:         newMetrics(table),
		dialer:    net.Dialer{Timeout: innerDialTimeout, KeepAlive: -1},
		listeners: map[net.Listener]struct{}{},
		sessions:  map[*session]struct{}{},
		own:       accept.NewOwn(),
	}
	f.refusals = accept.NewLimiter(refusalLogBurst, refusalLogWindow, f.now)
	f.ctx, f.cancel = context.WithCancel(context.Background())
	if err := f.m.register(reg); err != nil {
		return nil, fmt.Errorf("origin: register metrics: %w", err)
	}
	return f, nil
}

func (f *Front) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// Serve accepts connections on ln and handles each in a goroutine of its
// own (an idle one reused when there is one) until Shutdown, when it
// returns nil. The accept loop never reads.
func (f *Front) Serve(ln net.Listener) error {
	f.mu.Lock()
	if f.closing {
		f.mu.Unlock()
		ln.Close()
		return nil
	}
	f.listeners[ln] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.listeners, ln)
		f.mu.Unlock()
	}()
	loop := accept.Loop{
		Handle:  func(c net.Conn) { f.handlers.Go(func() { f.HandleConn(c) }) },
		Closing: f.isClosing,
		Log:     f.log,
		Own:     f.own,
		Looped:  func(c net.Conn) { f.looped(c) },
		Now:     f.now,
	}
	return loop.Serve(ln)
}

// looped counts a connection that came from one of the front's own inner
// connections (inner is the front itself) and was closed.
func (f *Front) looped(c net.Conn) {
	f.m.conns.WithLabelValues(HeaderNone, ResultLoop).Inc()
	if ok, suppressed := f.refusals.Allow(); ok {
		f.log.Warn("connection from the front itself refused: front.inner is this front", "measured", formatAddr(c.RemoteAddr()),
			"inner", f.cfg.Inner, "suppressed", suppressed)
	}
}

func (f *Front) isClosing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closing
}

// Shutdown stops accepting at once and waits for open connections to end;
// when ctx is done first it closes them and returns ctx's error.
func (f *Front) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	f.closing = true
	for ln := range f.listeners {
		ln.Close()
	}
	f.mu.Unlock()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	f.cancel()
	f.mu.Lock()
	open := make([]*session, 0, len(f.sessions))
	for s := range f.sessions {
		open = append(open, s)
	}
	f.mu.Unlock()
	for _, s := range open { // outside f.mu: a session ending takes it
		s.abort()
	}
	<-done
	return ctx.Err()
}

// HandleConn serves one accepted connection. It returns once the
// connection has been refused, or once its client→inner direction has gone
// idle or ended; forwarding then goes on in splice, without a goroutine of
// its own while the connection is idle. Shutdown waits for the end of
// every connection.
func (f *Front) HandleConn(c net.Conn) {
	s := &session{f: f, c: c, start: f.now(), measured: formatAddr(c.RemoteAddr())}
	s.header = HeaderNone
	f.mu.Lock()
	if f.closing || len(f.sessions) >= f.cfg.MaxConns {
		result := ResultShutdown
		if !f.closing {
			result = ResultMaxConns
		}
		f.mu.Unlock()
		f.own.Forget(c)
		c.Close()
		f.m.conns.WithLabelValues(HeaderNone, result).Inc()
		return
	}
	f.wg.Add(1)
	f.sessions[s] = struct{}{}
	f.mu.Unlock()
	f.m.active.Inc()
	s.run()
}

// session is one outer connection going through the front.
type session struct {
	f        *Front
	c        net.Conn
	start    time.Time
	measured string
	inner    net.Conn // the connection to inner, once dialled
	headerInfo

	mu   sync.Mutex
	pair *splice.Pair // set once forwarding has started
}

// end releases what HandleConn took, once the connection is over.
func (s *session) end() {
	s.f.own.Forget(s.c)
	s.f.m.active.Dec()
	s.f.mu.Lock()
	delete(s.f.sessions, s)
	s.f.mu.Unlock()
	s.f.wg.Done()
}

// abort closes the session's connections for a forced shutdown.
func (s *session) abort() {
	s.mu.Lock()
	p := s.pair
	s.mu.Unlock()
	if p != nil {
		p.Close() // wakes a direction parked while idle
		return
	}
	s.c.Close()
}

func (s *session) run() {
	f := s.f
	trusted := f.p.trusts(s.c.RemoteAddr())
	if !trusted && f.cfg.Untrusted == UntrustedReject {
		s.refuse(ResultUntrusted, "untrusted source rejected", nil)
		s.end()
		return
	}

	r := getReader(s.c)
	pend, err := s.readFront(r, trusted)
	putReader(r)
	if err != nil {
		s.end() // refused and counted by readFront
		return
	}

	token := f.table.beginDial()
	ic, err := f.dialer.DialContext(f.ctx, "tcp", f.cfg.Inner)
	if err != nil {
		f.table.endDial(token)
		s.refuse(ResultInnerError, "dial inner failed", err)
		s.end()
		return
	}
	inner := ic.(*net.TCPConn)
	if f.own.Dialed(inner) { // inner is this front: the connection came back
		f.table.endDial(token)
		inner.Close()
		s.refuse(ResultLoop, "front.inner is this front", nil)
		s.end()
		return
	}
	s.inner = inner
	port := inner.LocalAddr().(*net.TCPAddr).Port
	f.table.insert(token, Peer{
		InnerPort: port,
		Claimed:   s.claimed,
		Measured:  s.measured,
		Edge:      s.edge,
		ID:        s.id,
		Header:    s.header,
		Since:     s.start,
		Inner:     inner.LocalAddr().String(),
	})
	f.m.ok(s.header).Inc()

	// The bytes read past the header go first, in one write, before the
	// copy reads the client (splice.Conn): then both connections are plain
	// sockets and splice can park an idle direction without a goroutine.
	var client net.Conn = s.c
	if len(pend) > 0 {
		client = &splice.Conn{Conn: s.c, Peeked: pend}
	}
	p := splice.Prepare(client, inner, func(res splice.Result) { s.closed(res, port, token) })
	s.mu.Lock()
	s.pair = p
	s.mu.Unlock()
	p.Run() // client→inner in this goroutine (its stack grown by the dial) until it idles or ends
}

// closed erases the peer entry of a forwarded connection once both
// directions are done and writes its log line (none when no byte moved
// either way: a health check).
func (s *session) closed(res splice.Result, port int, token uint64) {
	f := s.f
	f.table.remove(port, token)
	f.own.Closed(s.inner)
	if res.Up != 0 || res.Down != 0 {
		// Typed attributes: no value boxed into an interface.
		f.log.LogAttrs(context.Background(), slog.LevelInfo, "connection closed",
			slog.String("id", s.id), slog.String("claimed", s.claimed), slog.String("measured", s.measured),
			slog.String("edge", s.edge), slog.String("header", s.header), slog.Int("inner_port", port),
			slog.Int64("bytes_up", res.Up), slog.Int64("bytes_down", res.Down),
			slog.Duration("duration", f.now().Sub(s.start)), slog.String("reason", res.Reason))
	}
	s.end()
}

// readFront sniffs the first bytes within header_timeout, applies the trust
// policy and reads the header if there is one. It returns the bytes already
// read past the header (or the sniffed bytes when there was none), or an
// error when the connection was refused.
func (s *session) readFront(r *bufio.Reader, trusted bool) ([]byte, error) {
	f := s.f
	s.c.SetReadDeadline(time.Now().Add(f.cfg.HeaderTimeout))
	k, err := sniff(r)
	s.header = k.String()
	if err != nil {
		return nil, s.readFailed(err, r.Buffered() > 0)
	}
	if v := judge(trusted, k, f.cfg.RequireHeader); v.result != "" {
		if v.result == ResultSpoofed {
			f.m.spoofed.Inc()
		}
		return nil, s.refuse(v.result, v.msg, nil)
	}
	if k != kindNone {
		h, err := readHeader(r, k)
		if err != nil {
			return nil, s.readFailed(err, true)
		}
		info, err := interpret(h)
		if err != nil {
			return nil, s.readFailed(err, true)
		}
		s.headerInfo = info
	}
	if err := s.c.SetReadDeadline(time.Time{}); err != nil {
		return nil, s.refuse(ResultEmpty, "", err)
	}
	return pending(r), nil
}

// readFailed refuses a connection whose first bytes or header could not be
// read: too slow, gone before a byte (no log line), or broken.
func (s *session) readFailed(err error, gotBytes bool) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		s.f.m.timeouts.Inc()
		if !gotBytes {
			s.header = HeaderNone
			return s.refuse(ResultTimeout, "", err) // silent: no log line
		}
		return s.refuse(ResultTimeout, "proxy header timeout", err)
	case !gotBytes:
		return s.refuse(ResultEmpty, "", err)
	}
	return s.refuse(ResultBadHeader, "bad proxy header", err)
}

// refuse closes the outer connection, counts it and, when msg is set, logs
// it through the rate limiter. It returns an error for readFront's caller.
func (s *session) refuse(result, msg string, err error) error {
	defer s.c.Close() // after counting: whoever sees the close sees the count
	s.f.m.conns.WithLabelValues(s.header, result).Inc()
	if msg != "" {
		if ok, suppressed := s.f.refusals.Allow(); ok {
			attrs := []any{"claimed", s.claimed, "measured", s.measured, "header", s.header, "reason", result}
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
			s.f.log.Log(context.Background(), level, msg, attrs...)
		}
	}
	if err == nil {
		err = errors.New(result)
	}
	return err
}

// formatAddr renders a socket address as ip:port, IPv4-mapped addresses
// as plain IPv4.
func formatAddr(a net.Addr) string {
	ap, ok := addrPort(a)
	if !ok {
		if a == nil {
			return ""
		}
		return a.String()
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
}
