package core

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgefleet/edgefleet/internal/accept"
	"github.com/edgefleet/edgefleet/internal/clock"
	"github.com/edgefleet/edgefleet/internal/errclass"
	"github.com/edgefleet/edgefleet/internal/inneraddr"
	"github.com/edgefleet/edgefleet/internal/loglimit"
	"github.com/edgefleet/edgefleet/internal/splice"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
	"github.com/prometheus/client_golang/prometheus"
)

// Peer is what the origin front knows about a client connection: the
// address the edge claims (empty without a PROXY header), the address the
// front measured (the edge, or the client itself), the edge's name and the
// connection id; Inner is the local address (ip:port) of the front's
// connection to the core.
type Peer struct {
	Claimed, Measured, Edge, ID, Inner string
	// Share is the front's share of the connection (origin.Peer.Share):
	// the handshake queue it waits in; "" queues it by Measured's host.
	Share string
}

// PeerLookup finds the Peer behind the core's client whose remote port is
// port (the front's inner connection). Nil, or false, leaves Claimed empty
// and Measured the socket's peer. A Peer whose Inner is not the client's
// whole remote address is not the client's: core.listen is reachable by
// every local process, which can bind another loopback address to the port
// of a live inner connection. The core then logs it as [unexpected] and
// uses no peer.
type PeerLookup func(port int) (Peer, bool)

// Server is the LDAP routing core.
type Server struct {
	cfg    Config
	log    *slog.Logger
	peers  PeerLookup
	m      *metrics
	tlsCfg *tls.Config
	certs  []tls.Certificate                 // the TLS config's, handed out by gateCert
	pins   atomic.Pointer[map[string]string] // in force: cfg.Pins, then SetPins's
	now    func() time.Time

	// DLP routing; proxy is nil in plain mode.
	file   *dlp.File
	proxy  *dlp.Proxy
	router *dlp.Router
	health *dlp.Health
	heard  heardFrom // what the core heard from each server (progress.go)
	// Load balancing and the backend monitor (balance.go, monitor.go).
	load      *dlp.Load
	balancers *dlp.Balancers
	monitor   *monitor

	ids atomic.Uint64
	// starved rate-limits the lines of dials that failed for lack of
	// local resources (a flood can make thousands).
	starved *loglimit.Limiter
	// TLS: the handshake gate, the session ticket keys, and the limiter
	// of refusal lines (handshake.go, tickets.go).
	gate     *gate
	tickets  *ticketKeys
	hsm      *handshakeMetrics
	refusals *loglimit.Limiter

	mu       sync.Mutex
	lns      map[net.Listener]struct{}
	conns    map[net.Conn]*session // nil in plain mode
	shutdown bool
	wg       sync.WaitGroup
}

// New builds a core. file may be nil (plain mode, with a warning when
// proxy mode asks for routing). A file whose servers need proxy mode 2 is
// an error naming the server.
func New(cfg Config, file *dlp.File, peers PeerLookup, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s := &Server{cfg: cfg, log: log, peers: peers, now: clock.Func(cfg.Now),
		lns: map[net.Listener]struct{}{}, conns: map[net.Conn]*session{}}
	s.starved = loglimit.New(1, 10*time.Second, s.now)
	s.refusals = loglimit.New(refusalBurst, refusalWindow, s.now)
	switch {
	case cfg.ProxyMode == 0:
	case file == nil:
		log.Warn("no DLP file: plain mode", "default_server", cfg.DefaultServer)
	case file.Proxy(cfg.Name) == nil:
		log.Warn("no LdapProxy named core.name in the DLP file: plain mode", "name", cfg.Name, "file", file.Path, "default_server", cfg.DefaultServer)
	default:
		s.file, s.proxy = file, file.Proxy(cfg.Name)
	}
	if s.proxy == nil {
		if cfg.DefaultServer == "" {
			return nil, fmt.Errorf("core.default_server is required in plain mode (proxy_mode 0, no DLP file, or no LdapProxy named %q)", cfg.Name)
		}
	} else {
		// Reported as errors of the file (dlp.ErrorList: exit 19 in cmd/origin).
		var errs dlp.ErrorList
		for _, name := range file.ServerOrder {
			if sv := file.Servers[name]; sv.SSL && cfg.ProxyMode < 2 {
				errs = append(errs, &dlp.Error{File: file.Path, Line: sv.SSLAt.Line, Col: sv.SSLAt.Col,
					Object: fmt.Sprintf("LdapServer %q", name), Key: "ssl", Msg: "ssl 1 needs core.proxy_mode 2"})
			}
		}
		if len(errs) > 0 {
			return nil, errs
		}
		s.health = dlp.NewHealth(file.Defaults.OfflineRetryTimeout, s.now)
		s.heard = newHeard(file.ServerOrder)
		s.router = dlp.NewRouter(file, s.proxy, s.health)
	}
	s.SetPins(cfg.Pins) // checked by Validate above
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s.m = m
	if s.hsm, err = newHandshakeMetrics(reg); err != nil {
		return nil, err
	}
	if cfg.TLSMode != TLSOff {
		s.tlsCfg = s.serverTLS()
		s.tickets = newTicketKeys(s.tlsCfg, cfg.TicketRotation, cfg.TicketKeys, cfg.SharedTicketKeys, s.now)
		s.gate = newGate(cfg.HandshakeSlots, cfg.HandshakeQueueTimeout, s.now, s.hsm.queued)
	}
	if s.file != nil {
		if err := s.startBalancing(reg); err != nil {
			return nil, err
		}
		s.monitor.start()
	}
	return s, nil
}

// Plain reports whether the core forwards connections unchanged.
func (s *Server) Plain() bool { return s.proxy == nil }

// Health is the OFFLINE state shared by all connections (nil in plain mode).
func (s *Server) Health() *dlp.Health { return s.health }

// Serve accepts connections from ln until it is closed or Shutdown runs.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return net.ErrClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
	}()
	loop := accept.Loop{
		Handle: func(c net.Conn) { go s.HandleConn(c) },
		Closing: func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.shutdown
		},
		Log: s.log,
		Now: s.now,
	}
	return loop.Serve(ln)
}

// HandleConn serves one client connection until it ends.
func (s *Server) HandleConn(c net.Conn) {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		c.Close()
		return
	}
	var ss *session
	if s.proxy != nil {
		ss = newSession(s, c, Peer{})
	}
	s.conns[c] = ss
	s.wg.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetKeepAlive(true)
		tc.SetKeepAlivePeriod(15 * time.Second)
	}
	peer := s.peerOf(c)
	s.m.active.Inc()
	defer s.m.active.Dec()
	if ss == nil {
		s.plain(c, peer)
		return
	}
	ss.peer = peer
	ss.run()
}

func (s *Server) peerOf(c net.Conn) Peer {
	p := Peer{Measured: c.RemoteAddr().String()}
	ta, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok || s.peers == nil {
		p.ID = s.nextID()
		return p
	}
	if found, ok := s.peers(ta.Port); ok {
		if remote := ta.AddrPort(); inneraddr.Is(found.Inner, remote) {
			p = found
		} else {
			s.log.Error("[unexpected] a peer table entry for the client's port belongs to another address: no peer",
				"measured", p.Measured, "inner", found.Inner, "id", found.ID, "claimed", found.Claimed, "edge", found.Edge)
		}
	}
	if p.ID == "" {
		p.ID = s.nextID()
	}
	return p
}

func (s *Server) nextID() string { return fmt.Sprintf("core-%d", s.ids.Add(1)) }

// plain joins the client to the default server unchanged. The client
// side stays as configured: with TLS on, the core terminates LDAPS (and
// checks pins) before joining, so falling back to plain mode never opens
// the directory to clients the TLS mode would refuse. Plain mode does not
// parse LDAP, so it offers no StartTLS: a plain LDAP client gets a Notice
// of Disconnection (confidentialityRequired).
func (s *Server) plain(c net.Conn, p Peer) {
	start := s.now()
	agent := ""
	if s.tlsCfg != nil {
		ss := newSession(s, c, p)
		if !ss.accept() {
			c.Close()
			return
		}
		if !ss.isTLS {
			c.Write(wire.NoticeOfDisconnection(13, "confidentiality required: use LDAPS")) // confidentialityRequired
			ss.shutWrite()
			ss.drain()
			s.refusal("plain mode: refused a connection without TLS", p, "target", s.cfg.DefaultServer)
			return
		}
		c, agent = ss.client, ss.agent
	}
	d := net.Dialer{Timeout: 3 * time.Second, KeepAlive: 15 * time.Second}
	up, err := d.Dial("tcp", s.cfg.DefaultServer)
	if err != nil {
		c.Close()
		if errclass.LocalResources(err) { // a flood: one line per 10 s, not one per client
			s.starving(s.cfg.DefaultServer, err)
			return
		}
		s.log.Warn("plain mode: dial default server", "id", p.ID, "claimed", p.Claimed, "measured", p.Measured, "edge", p.Edge,
			"agent", agent, "target", s.cfg.DefaultServer, "err", err)
		return
	}
	res := splice.Join(c, up)
	s.log.Info("plain connection", "id", p.ID, "claimed", p.Claimed, "measured", p.Measured, "edge", p.Edge,
		"agent", agent, "target", s.cfg.DefaultServer, "bytes_up", res.Up, "bytes_down", res.Down,
		"duration", s.now().Sub(start), "reason", res.Reason)
}

// Shutdown stops accepting, waits for open connections to end until ctx is
// done, then closes them.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.monitor != nil {
		s.monitor.stop()
	}
	s.mu.Lock()
	s.shutdown = true
	for ln := range s.lns {
		ln.Close()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for c, ss := range s.conns {
		c.Close()
		if ss != nil {
			ss.abort() // a session may be stuck writing to a server that stopped reading
		}
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

func (s *Server) dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	if s.cfg.DialBackend != nil {
		return s.cfg.DialBackend(ctx, addr)
	}
	d := net.Dialer{KeepAlive: 15 * time.Second}
	return d.DialContext(ctx, "tcp", addr)
}

func (s *Server) backendTLS(host string) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.cfg.BackendTLS != nil {
		c = s.cfg.BackendTLS.Clone()
	}
	if c.ServerName == "" {
		c.ServerName = host
	}
	return c
}

// fail marks a server OFFLINE for every connection after a connect or I/O
// failure, and tells the balancers (a failover balancer moves off it). A local resource error (out of file descriptors or memory:
// errclass.LocalResources) is this host's, not the server's: it marks
// nothing and logs at most one line per 10 s.
func (s *Server) fail(name string, err error) {
	if errclass.LocalResources(err) {
		s.starving(name, err)
		return
	}
	s.health.Fail(name)
	s.balancers.Failed(name)
	s.log.Warn("server offline", "target", name, "err", err)
}

// starving logs, at most once per 10 s, a dial or check that failed for
// lack of local resources: it marked nothing.
func (s *Server) starving(name string, err error) {
	if ok, suppressed := s.starved.Allow(); ok {
		s.log.Warn("out of local resources: no server marked OFFLINE", "target", name, "err", err, "suppressed", suppressed)
	}
}

// connect opens a connection to server name: TCP, and TLS for an ssl:1
// server.
func (s *Server) connect(ctx context.Context, name string) (net.Conn, error) {
	sv := s.file.Servers[name]
	conn, err := s.dialTCP(ctx, sv.Addr())
	if err != nil || !sv.SSL {
		return conn, err
	}
	tc := tls.Client(conn, s.backendTLS(sv.Host))
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}

// answers reports whether server name answers a root DSE search on a new
// connection within ConnectTimeout. It tells a server that ended one
// connection on purpose from one that failed: a dying process may still
// complete a TCP handshake, but not answer. When it does not answer, that
// is a failed check (the caller marks the server OFFLINE) — unless it was
// sending on other connections meanwhile: busy, and so alive
// (progress.go).
func (s *Server) answers(name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.file.Defaults.ConnectTimeout)
	defer cancel()
	err := s.checkServer(ctx, name)
	// A local resource error: no check could be made, not the server's failure.
	return err == nil || errclass.LocalResources(err) || errors.Is(err, errServerBusy)
}

func (s *Server) succeed(name string) {
	s.health.Succeed(name)
}
